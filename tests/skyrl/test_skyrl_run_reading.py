"""Reading a SkyRL run as the notebooks and the CLI do: the one "is this a SkyRL run" rule
(`readers.find_skyrl_run`), the run found from its run dir or its export dir, `rlkit plot` and
`rlkit eval` on it, and the episodes notebook 05 replays.

The run is one SkyRL's own trainer wrote (`rlkit submit --preset skyrl-tiny-cpu --address
local`): the session's shared run, copied so nothing here can write into it (`skyrl_run_dir`
in tests/skyrl/conftest.py).
"""

import json
import shutil

import pytest
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.cli.main import main
from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.failures import classify
from rlkit.errors import UsageError
from rlkit.notebook import baselines, workbench
from rlkit.notebook.report import BASE
from rlkit.run.skyrl_layout import SkyRLRun, find_skyrl_run

pytestmark = pytest.mark.timeout(RUN_TIMEOUT)  # the first test pays for the run


def test_one_rule_tells_a_skyrl_run_from_a_local_run_and_from_anything_else(tmp_path):
    run = tmp_path / "sky"
    (run / "exports" / "dumped_evals").mkdir(parents=True)
    assert find_skyrl_run(run) == SkyRLRun(export_dir=run / "exports", run_dir=run)
    # its export dir (SkyRL's export_path) leads back to the run dir, where the metrics are
    assert find_skyrl_run(run / "exports") == find_skyrl_run(run)
    assert find_skyrl_run(run).name == "sky"
    # just submitted: rlkit's entry wrote data/ before SkyRL started, nothing exported yet
    fresh = tmp_path / "fresh"
    (fresh / "data").mkdir(parents=True)
    (fresh / "data" / "eval.parquet").write_bytes(b"")
    assert find_skyrl_run(fresh) == SkyRLRun(export_dir=fresh / "exports", run_dir=fresh)
    # an export dir outside a run dir: the dumps, and no run dir to take metrics from
    lone = tmp_path / "copied-dumps"
    (lone / "dumped_evals").mkdir(parents=True)
    assert find_skyrl_run(lone) == SkyRLRun(export_dir=lone, run_dir=None)
    # rlkit's local trainer writes run.json first: whatever else is there, a local run
    local = tmp_path / "local"
    (local / "exports" / "dumped_evals").mkdir(parents=True)
    (local / "run.json").write_text("{}")
    assert find_skyrl_run(local) is None
    assert find_skyrl_run(tmp_path / "missing") is None is find_skyrl_run(local / "run.json")
    assert find_skyrl_run(tmp_path / "fresh" / "data") is None


def test_the_notebooks_find_the_run_from_its_run_dir_or_its_export_dir(skyrl_run_dir):
    run = skyrl_run_dir
    assert workbench.run_source("unused", "local-tiny", run_dir=run) == run
    assert workbench.run_source("unused", "local-tiny", skyrl_export=run / "exports") == run
    with pytest.raises(UsageError, match="give one"):
        workbench.run_source("unused", "local-tiny", run_dir=run, skyrl_export=run / "exports")
    evals = workbench.checkpoint_evals(run)
    dumped = {p.name for p in (run / "exports" / "dumped_evals").iterdir() if p.is_dir()}
    assert {f"global_step_{s}_evals" for s in evals} == dumped and list(evals) == sorted(evals)
    assert [r.policy for r in evals.values()] == [f"{run.name}@{s}" for s in evals]
    same = workbench.checkpoint_evals(run / "exports")
    assert {s: r.per_maze for s, r in same.items()} == {s: r.per_maze for s, r in evals.items()}
    assert workbench.final_greedy_eval(run) is None  # SkyRL's evals only, no model loaded


def test_eval_trajectories_of_a_skyrl_step_line_up_with_its_eval_result(skyrl_run_dir):
    for step, result in workbench.checkpoint_evals(skyrl_run_dir).items():
        trajs = workbench.eval_trajectories(skyrl_run_dir, step)
        assert len(trajs) == result.n_mazes * result.samples
        for i, row in enumerate(result.per_maze):
            for k, solved in enumerate(row["solved"]):
                t = workbench.episode(trajs, result, i, k)
                assert (t.maze_obj.content_hash, t.solved, t.sample) == (row["hash"], solved, k)
        assert {t.policy for t in trajs} == {result.policy}


def test_a_skyrl_run_gets_the_cached_baselines_on_its_test_set_but_not_the_local_base(
    skyrl_run_dir, tmp_path
):
    evals = workbench.checkpoint_evals(skyrl_run_dir)
    last = evals[max(evals)]
    root = tmp_path / "out" / "baselines"
    root.mkdir(parents=True)
    fields = last.to_dict() | {"trajectories": None}
    for name, n in ((BASE, last.n_mazes), ("oracle", last.n_mazes), ("random", 64)):
        data = fields | {"policy": name, "n_mazes": n}
        (root / f"{name}.json").write_text(json.dumps(data))
    kept = baselines.run_baselines(tmp_path / "out", skyrl_run_dir, evals)
    assert list(kept) == ["oracle"] and isinstance(kept["oracle"], EvalResult)


def test_replays_of_a_skyrl_run_pair_its_first_and_last_eval(skyrl_run_dir, tmp_path):
    shown = workbench.run_replays(skyrl_run_dir)
    steps = sorted(workbench.checkpoint_evals(skyrl_run_dir))
    assert (
        shown.labels == (f"step {steps[0]}", f"step {steps[-1]}")
        and shown.run == skyrl_run_dir.name
    )
    first, last = shown.pair
    assert first.maze_obj == last.maze_obj == shown.episode.maze_obj
    assert last is shown.episode and first.policy == f"{shown.run}@{steps[0]}"
    assert all(classify(t) == kind for kind, t in shown.failures().items())
    assert set(shown.failures()) == {kind for kind, n in shown.last.failures.items() if n}
    # one evaluated step: its replays, nothing to compare with (on a copy: the run may be shared)
    exports = shutil.copytree(skyrl_run_dir / "exports", tmp_path / "one-eval" / "exports")
    for step in steps[:-1]:
        shutil.rmtree(exports / "dumped_evals" / f"global_step_{step}_evals")
    alone = workbench.run_replays(exports.parent, maze=1)
    assert alone.pair is None and alone.maze == 1 and alone.label == f"step {steps[-1]}"
    assert alone.episode.maze_obj.content_hash == alone.last.per_maze[1]["hash"]


def test_rlkit_plot_on_a_skyrl_run_dir_and_on_its_export_dir(skyrl_run_dir, tmp_path, capsys):
    for given in (skyrl_run_dir, skyrl_run_dir / "exports"):
        solve, curves = tmp_path / f"{given.name}-solve.png", tmp_path / f"{given.name}-c.png"
        argv = ["plot", "--run-dir", str(given), "--out", str(solve), "--curves", str(curves)]
        assert main(argv) == 0, capsys.readouterr().err
        assert solve.read_bytes()[:4] == curves.read_bytes()[:4] == b"\x89PNG"


def test_rlkit_eval_on_a_skyrl_run_names_an_export_to_evaluate(skyrl_run_dir, capsys):
    assert main(["eval", "--policy", str(skyrl_run_dir)]) == 2
    err = capsys.readouterr().err
    newest = max(
        int(p.name.split("_")[-1]) for p in (skyrl_run_dir / "exports").glob("global_step_*")
    )
    assert "is a SkyRL run, not a model" in err
    assert f"--policy {skyrl_run_dir}/exports/global_step_{newest}/policy" in err
