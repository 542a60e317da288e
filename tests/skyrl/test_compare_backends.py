"""A local run and the suite's SkyRL CPU run compared through rlkit.notebook.compare: both read
by the one run reader, paired on the mazes both evaluated with the samples both have, and
timed by their trainers' own clocks."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.notebook import compare
from rlkit.stats import paired_by_maze

pytestmark = pytest.mark.timeout(RUN_TIMEOUT)  # the first test of the group pays for the run


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """A smoke run of the local trainer (about 10 s)."""
    from rlkit.train.presets import preset
    from rlkit.train.trainer import train

    run_dir = tmp_path_factory.mktemp("compare") / "local-smoke"
    train(preset("smoke"), run_dir, progress=False)
    return run_dir


def test_a_local_run_and_the_skyrl_cpu_run_compare_maze_by_maze(local_run, skyrl_run_dir):
    views = compare.load_runs([local_run, skyrl_run_dir], labels=["local", "skyrl"])
    local, sky = views
    assert [v.run.backend for v in views] == ["local", "skyrl"]
    assert local.warm_start_end is not None and sky.warm_start_end is None
    # SkyRL's wall time: its step timer summed, one value per logged step
    timed = [r["timing/step"] for r in sky.run.metrics() if "timing/step" in r]
    assert sky.wall_s[max(sky.wall_s)] == pytest.approx(sum(timed)) and sum(timed) > 0
    # paired on SkyRL's few mazes (a subset of the same pinned set), one sample each
    final = compare.compare_runs(views)[0]
    rl, rs = local.evals[local.final_step], sky.evals[sky.final_step]
    assert rs.test_set_hash == rl.test_set_hash and rs.n_mazes < rl.n_mazes
    hashes = {m["hash"]: m["solved"] for m in rl.per_maze}
    shared = [m for m in rs.per_maze if m["hash"] in hashes]
    assert len(shared) == rs.n_mazes
    ours = [hashes[m["hash"]][:1] for m in shared]
    theirs = [m["solved"][:1] for m in shared]
    assert final.test == paired_by_maze(ours, theirs)
    assert final.verdict.startswith(
        f"final checkpoints (local step {local.final_step}, skyrl step {sky.final_step}): "
    )
    assert final.verdict.endswith(
        f"{rs.n_mazes} mazes x 1 sample both evaluated (the first sample of each maze))"
    )
    # the table and the figures hold both runs
    total = compare.difficulty_rows(views)[-1]
    assert (total["local"][2], total["skyrl"][2]) == (rl.n_mazes, rs.n_mazes)
    by_step, by_wall = compare.solve_rate_curves(views, align="grpo").axes
    assert len([ln for ln in by_wall.get_lines() if ln.get_marker() == "o"]) == 2
    xs = [list(ln.get_xdata()) for ln in by_step.get_lines() if ln.get_marker() == "o"]
    assert xs[1] == sorted(sky.evals)  # SkyRL's GRPO starts at its step 0
    assert xs[0][0] == min(local.evals) - local.warm_start_end
