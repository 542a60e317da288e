"""The one run interface on the run SkyRL's own trainer wrote (the suite's SkyRL CPU run): the
same `Run` a local run gives, its config the one rlkit's entry recorded, and its summary (what a
kernel without the run's files reads through the cluster) with that config. Notebooks 04 -> 05
on it: tests/skyrl/test_skyrl_notebooks.py.
"""

import json
from pathlib import Path

import pytest
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.notebook.progress import read_progress
from rlkit.run import open_run
from rlkit.run.backends import SkyRLRunReader, SummaryRun
from rlkit.run.skyrl_dumps import read_eval_dump, read_eval_dumps

pytestmark = pytest.mark.timeout(RUN_TIMEOUT)  # the first test pays for the run


def test_open_run_reads_a_skyrl_run_as_it_reads_a_local_one(skyrl_run_dir):
    run = open_run(skyrl_run_dir)
    assert isinstance(run, SkyRLRunReader) and run.backend == "skyrl"
    assert open_run(skyrl_run_dir / "exports").path == run.path == skyrl_run_dir
    # the config is the run's own, recorded by rlkit's entry before SkyRL started
    assert run.info()["backend"] == "skyrl"
    config = run.config()
    resolved = config["skyrl"]  # SkyRL's whole config as it trained (a copy: its first dir)
    assert Path(resolved["trainer"]["ckpt_path"]).name == skyrl_run_dir.name
    assert config["overrides"]["trainer.ckpt_path"] == resolved["trainer"]["ckpt_path"]
    assert resolved["trainer"]["algorithm"]["advantage_estimator"] == "grpo"
    assert config["entry"]["layout"]["device"] == "cpu" and run.preset == "skyrl-tiny-cpu"
    assert config["datasets"]["env_config"]  # the env the run trained and evaluated on
    # evals, episodes and checkpoints: SkyRL's dumps and exports, as rlkit types
    evals = run.evals()
    assert sorted(evals) == run.eval_steps() == sorted(read_eval_dumps(skyrl_run_dir / "exports"))
    last = max(evals)
    trajs = run.trajectories(last)
    assert len(trajs) == evals[last].n_mazes * evals[last].samples
    assert [t.reward for t in trajs] == [
        t.reward for t in read_eval_dump(skyrl_run_dir / "exports", last).trajectories()
    ]
    ckpts = run.checkpoints()
    assert ckpts[-1].complete and ckpts[-1].hf_export is not None
    step = ckpts[-1].step
    assert ckpts[-1].hf_export == skyrl_run_dir / "exports" / f"global_step_{step}" / "policy"
    assert run.latest_checkpoint() == ckpts[-1]
    # SkyRL's warm start built the model before step 0: no boundary; every step is GRPO
    assert run.warm_start_end() is None
    progress = read_progress(run)
    trained = {r["step"] for r in run.metrics() if "rollout/reward_mean" in r}
    assert progress.phase == "GRPO" and progress.grpo_step == len(trained) > 0
    # read elsewhere (a Ray job where the files are), the run keeps its config and datasets
    back = SummaryRun(json.loads(json.dumps(run.summary())))
    assert back.config() == config and back.evals().keys() == evals.keys()
