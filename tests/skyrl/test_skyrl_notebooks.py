"""Notebooks 04 and 05 on a run SkyRL's own trainer wrote, given by its run dir (the path
`rlkit submit` printed) and the SkyRL preset's name, executed with papermill as `rlkit demo`
executes them: the figures they show for a local run.

04 must plot the solve rate across the run's evaluated steps and write summary.json; 05 must
replay an episode SkyRL played, the checkpoint diff and the failures by kind, as kernel-free
players. Neither may write into the run. The run comes from `skyrl_run_dir`, the one place to
re-point (the suite's session run, `skyrl_cpu_run.run_dir`).
"""

import json
from pathlib import Path

import pytest
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.notebook.demo import ensure_kernel, execute
from rlkit.run.skyrl_dumps import read_eval_dumps

# a kernel per notebook: ~15 s each, after the session's SkyRL run (the first test pays for it)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT)]


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def _run(name: str, out: Path, run_dir: Path) -> list[dict]:
    """Execute notebook `name` on `run_dir`; its outputs, after checking there is no error and
    that the run dir is as it was."""
    before = _files(run_dir)
    path = execute(
        name,
        out,
        {"out_dir": str(out), "preset": "skyrl-tiny-cpu", "run_dir": str(run_dir)},
        kernel=ensure_kernel(),
    )
    assert _files(run_dir) == before, f"{name} wrote into the run dir"
    outputs = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    return outputs


def _html(outputs: list[dict]) -> list[str]:
    return ["".join(o["data"]["text/html"]) for o in outputs if "text/html" in o.get("data", {})]


def test_notebook_04_plots_the_solve_rate_across_a_skyrl_runs_evaluated_steps(
    skyrl_run_dir, tmp_path
):
    out = tmp_path / "out"
    outputs = _run("04_solve_rate_across_checkpoints", out, skyrl_run_dir)
    evals = read_eval_dumps(skyrl_run_dir / "exports")
    first, last = min(evals), max(evals)
    curve = out / "plots" / "solve_rate_across_checkpoints.png"
    pngs = (
        "solve_rate_across_checkpoints",
        "solve_rate_by_difficulty",
        "training_curves",
        "stability",
    )
    for png in pngs:
        assert (out / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    assert sum("image/png" in o.get("data", {}) for o in outputs) == len(pngs)
    texts = "".join("".join(o.get("text", "")) for o in outputs)
    assert f"{skyrl_run_dir.name}: skyrl run," in texts  # the run, described by open_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"] == str(skyrl_run_dir) and str(curve) in summary["plots"]
    assert sorted(summary["checkpoints"]) == sorted(str(s) for s in evals)
    for step, row in summary["checkpoints"].items():
        assert row["solve_rate"] == round(evals[int(step)].solve_rate, 4)
        assert row["ci95"][0] <= row["solve_rate"] <= row["ci95"][1]
    # a SkyRL run's untrained model is its first eval; the paired test runs from it to the last
    assert summary["baseline"]["policy"] == f"{skyrl_run_dir.name}@{first}"
    assert summary["paired_test"]["steps"] == [first, last]
    assert summary["final_greedy"] is None


def test_notebook_05_replays_episodes_skyrl_played(skyrl_run_dir, tmp_path):
    out = tmp_path / "out"
    outputs = _run("05_replay_and_failures", out, skyrl_run_dir)
    evals = read_eval_dumps(skyrl_run_dir / "exports")
    first, last = min(evals), max(evals)
    players = _html(outputs)
    assert all("class='rlkit-player'" in h for h in players if "<h4>" not in h)
    replay, diff = players[0], players[1]
    assert f"<b>step {last}</b>" in replay and "'rlkit-frame'" in replay
    assert f"<b>step {first}</b>" in diff and f"<b>step {last}</b>" in diff
    kinds = [h.removeprefix("<h4>").removesuffix("</h4>") for h in players if h.startswith("<h4>")]
    assert kinds == [k for k, n in evals[last].failures.items() if n]  # one replay per kind
    assert len(players) == 2 + 2 * len(kinds)
    assert (out / "plots" / "final_failures.png").read_bytes()[:4] == b"\x89PNG"
