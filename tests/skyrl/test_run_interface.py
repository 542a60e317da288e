"""The one run interface on the run SkyRL's own trainer wrote (the suite's SkyRL CPU run): the
same `Run` a local run gives, its config the one rlkit's entry recorded, and notebooks 04 -> 05
executed on it with the SkyRL preset's name, showing the figures they show for a local run.
"""

import json
from pathlib import Path

import pytest
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.notebook.demo import ensure_kernel, execute
from rlkit.notebook.progress import read_progress
from rlkit.run import open_run
from rlkit.run.reader import SkyRLRunReader
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
    assert config["entry"]["device"] == "cpu"
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


def _execute(name: str, out: Path, params: dict) -> list[dict]:
    path = execute(name, out, params, kernel=ensure_kernel())
    outputs = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    return outputs


def test_notebooks_04_then_05_on_the_skyrl_run_show_what_they_show_for_a_local_run(
    skyrl_run_dir, tmp_path
):
    out = tmp_path / "out"
    params = {"out_dir": str(out), "preset": "skyrl-tiny-cpu", "run_dir": str(skyrl_run_dir)}
    outputs = _execute("04_solve_rate_across_checkpoints", out, params)
    texts = "".join("".join(o.get("text", "")) for o in outputs)
    assert f"{skyrl_run_dir.name}: skyrl run," in texts
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3  # curve, by length, curves
    for png in ("solve_rate_across_checkpoints", "solve_rate_by_difficulty", "training_curves"):
        assert (out / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"] == str(skyrl_run_dir) and summary["final_greedy"] is None
    outputs = _execute("05_replay_and_failures", out, params)
    players = ["".join(o["data"]["text/html"]) for o in outputs if "text/html" in o.get("data", {})]
    assert players and "class='rlkit-player'" in players[0]
    assert (out / "plots" / "final_failures.png").read_bytes()[:4] == b"\x89PNG"
