"""Comparing runs (rlkit.notebook.compare, notebook 06) on two real smoke runs of different
seeds: loading by path and by name, wall time from metrics.jsonl, the paired test and its
sentence, the per-difficulty table, the figures, and notebook 06 executed on both runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlkit.errors import UsageError
from rlkit.notebook import compare
from rlkit.run import RunNotFound, open_run
from rlkit.stats import paired_by_maze

SEEDS = (1, 2)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A home with two smoke runs, seeds 1 and 2, under runs/cmp/ (about 10 s each)."""
    from rlkit.train.presets import preset
    from rlkit.train.trainer import train

    root = tmp_path_factory.mktemp("home")
    for seed in SEEDS:
        cfg = preset("smoke").with_overrides({"schedule.seed": seed})
        train(cfg, root / "runs" / "cmp" / f"seed-{seed}", progress=False)
    return root


@pytest.fixture(scope="module")
def run_dirs(home) -> list[Path]:
    return [home / "runs" / "cmp" / f"seed-{s}" for s in SEEDS]


@pytest.fixture(scope="module")
def views(run_dirs) -> list[compare.RunView]:
    return compare.load_runs(run_dirs, labels=["seed 1", "seed 2"])


def test_runs_load_by_path_or_by_name_with_their_evals_and_training_time(
    views, run_dirs, home, monkeypatch
):
    for view, path in zip(views, run_dirs, strict=True):
        run = open_run(path)
        assert view.run.path == path and view.evals.keys() == run.evals().keys()
        assert view.final_step == max(run.evals()) == 8
        trained = {s: r.solve_rate for s, r in run.evals().items() if s > 0}
        assert view.evals[view.best_step].solve_rate == max(trained.values())
        assert view.warm_start_end == run.warm_start_end() is not None
        # wall time: the trainer's own elapsed seconds, 0 before the first step
        elapsed = [r["timing/elapsed_s"] for r in run.metrics() if "timing/elapsed_s" in r]
        assert view.wall_s[0] == 0.0 and view.wall_s[8] == elapsed[-1] > 0
        walls = [view.wall_s[s] for s in sorted(view.wall_s)]
        assert walls == sorted(walls)
    monkeypatch.setenv("RLKIT_HOME", str(home))
    by_name = compare.load_runs(["seed-2", "runs/cmp/seed-1"])
    assert [v.run.path for v in by_name] == [run_dirs[1], run_dirs[0]]
    assert [v.label for v in by_name] == ["seed-2", "seed-1"]


def test_bad_run_lists_are_one_line_refusals(run_dirs, home, monkeypatch):
    monkeypatch.setenv("RLKIT_HOME", str(home))
    with pytest.raises(UsageError, match="give a list of run dirs"):
        compare.load_runs(str(run_dirs[0]))
    with pytest.raises(UsageError, match="1 labels for 2 runs"):
        compare.load_runs(run_dirs, labels=["a"])
    with pytest.raises(UsageError, match="share a label"):
        compare.load_runs(run_dirs, labels=["a", "a"])
    with pytest.raises(RunNotFound, match="none named 'seed-9'"):
        compare.load_runs(["seed-9"])
    with pytest.raises(UsageError, match="at least two"):
        compare.compare_runs(compare.load_runs(run_dirs[:1]))
    with pytest.raises(UsageError, match="reference 'x' is none of the runs"):
        compare.compare_runs(compare.load_runs(run_dirs), reference="x")


def test_final_checkpoints_pair_maze_by_maze_and_the_verdict_counts_the_discordant_mazes(views):
    a, b = views
    first, *rest = compare.compare_runs(views)
    assert first.which == "final" and (first.step_a, first.step_b) == (8, 8)
    ra, rb = a.evals[8], b.evals[8]
    assert [m["hash"] for m in ra.per_maze] == [m["hash"] for m in rb.per_maze]
    b_only = sum(y[0] and not x[0] for x, y in zip(ra.episodes, rb.episodes, strict=True))
    a_only = sum(x[0] and not y[0] for x, y in zip(ra.episodes, rb.episodes, strict=True))
    assert (first.test.b_better, first.test.a_better) == (b_only, a_only)
    assert first.test == paired_by_maze(ra.episodes, rb.episodes)
    verdict = first.verdict
    assert verdict.startswith("final checkpoints (seed 1 step 8, seed 2 step 8): ")
    assert f"p={first.test.p_value:.2g}, " in verdict and "at 5%" in verdict
    assert verdict.endswith("64 mazes x 1 sample)")
    if b_only or a_only:
        assert f"seed 2 solves {b_only} maze" in verdict
        assert f"fails {a_only} that seed 1 solves" in verdict
    assert all(c.which == "best" for c in rest)
    # a run against itself: nothing differs, nothing is significant
    same = compare.compare_checkpoints(a, replace(a, label="again"))
    assert "again and seed 1 solve exactly the same mazes; p=1, not significant" in same.verdict


def test_the_verdict_states_counts_p_and_significance_in_words():
    # B alone solves 7 mazes, A alone 1, both fail 56: McNemar's exact p = 2 * 9 / 256
    a = [[False]] * 7 + [[True]] + [[False]] * 56
    b = [[True]] * 7 + [[False]] + [[False]] * 56
    c = compare.Comparison("A", 8, "B", 8, "final", paired_by_maze(a, b), 64, 64, 1, 1)
    assert c.test.p_value == pytest.approx(18 / 256)
    assert c.verdict.startswith(
        "final checkpoints (A step 8, B step 8): B solves 7 mazes A fails and fails 1 that A "
        "solves; p=0.07, not significant at 5% (B - A = +9.4 points, 95% CI "
    )
    b = [[True]] * 12 + [[False]] * 52
    a = [[False]] * 64
    strong = compare.Comparison("A", 4, "B", 6, "best", paired_by_maze(a, b), 64, 64, 1, 1)
    assert "p=0.00049, significant at 5%" in strong.verdict and strong.significant
    two = [[True, False]] * 5 + [[False, False]] * 3
    both = [[True, True]] * 5 + [[False, False]] * 3
    k2 = compare.Comparison("A", 1, "B", 1, "final", paired_by_maze(two, both), 8, 64, 2, 4)
    assert (
        "B solves a larger share of its 2 samples than A on 5 mazes and a smaller share on 0"
        in (k2.verdict)
    )
    assert k2.verdict.endswith(
        "8 mazes x 2 samples both evaluated (the first 2 samples of each maze))"
    )


def test_runs_evaluated_on_different_mazes_or_samples_pair_on_what_they_share(views):
    a, b = views
    rb = b.evals[8]
    fewer = replace(rb, per_maze=rb.per_maze[:8], n_mazes=8)  # as a SkyRL run's eval_mazes=8
    oa, ob = compare.paired_outcomes(a.evals[8], fewer)
    assert len(oa) == len(ob) == 8
    assert ob == [m["solved"] for m in rb.per_maze[:8]]
    doubled = replace(a.evals[8], samples=2, per_maze=[
        {**m, "solved": m["solved"] * 2} for m in a.evals[8].per_maze
    ])  # fmt: skip
    oa, ob = compare.paired_outcomes(doubled, fewer)
    assert all(len(x) == len(y) == 1 for x, y in zip(oa, ob, strict=True))
    other = replace(rb, per_maze=[{**m, "hash": "x" + m["hash"]} for m in rb.per_maze])
    with pytest.raises(UsageError, match="share no test maze"):
        compare.paired_outcomes(a.evals[8], other)


def test_the_difficulty_table_splits_each_final_eval_by_path_length(views):
    rows = compare.difficulty_rows(views)
    total = rows[-1]
    assert total["maze"] == "all"
    for v in views:
        final = v.evals[v.final_step]
        assert total[v.label] == (final.solve_rate, final.ci95, 64)
        assert sum(r[v.label][2] for r in rows[:-1]) == 64  # every maze in one row
        for r in rows[:-1]:
            cell = final.by_path_length[str(r["path"])]
            rate, (lo, hi), n = r[v.label]
            assert (rate, n) == (cell["solve_rate"], cell["mazes"])
            assert [lo, hi] == pytest.approx(cell["ci95"])
    text = compare.format_table(rows).splitlines()
    assert text[0].split() == ["maze", "path", "seed", "1", "seed", "2"]
    assert len(text) == len(rows) + 1 and text[-1].startswith("all")
    assert "n=64" in text[-1]


def test_the_figures_draw_every_run_by_step_and_by_wall_time(views):
    fig = compare.solve_rate_curves(views)
    by_step, by_wall = fig.axes
    assert [line.get_label() for line in by_step.get_lines() if line.get_marker() == "o"] == [
        "seed 1 (local)",
        "seed 2 (local)",
    ]
    x_step = by_step.get_lines()[0].get_xdata()
    assert list(x_step) == sorted(views[0].evals)
    x_wall = [line.get_xdata() for line in by_wall.get_lines()]
    assert [list(x) for x in x_wall] == [[v.wall_s[s] for s in sorted(v.evals)] for v in views]
    grpo = compare.solve_rate_curves(views, align="grpo")
    shifted = grpo.axes[0].get_lines()[0].get_xdata()
    assert list(shifted) == [s - views[0].warm_start_end for s in sorted(views[0].evals)]
    with pytest.raises(UsageError, match="align"):
        compare.solve_rate_curves(views, align="time")
    bars = compare.difficulty_figure(views)
    assert bars.axes[0].get_legend_handles_labels()[1] == [
        "seed 1 (final, step 8)",
        "seed 2 (final, step 8)",
    ]


@pytest.mark.slow
def test_notebook_06_executes_on_two_runs_and_prints_the_paired_verdict(views, run_dirs, tmp_path):
    from rlkit.notebook.demo import ensure_kernel, execute

    params = {
        "runs": [str(p) for p in run_dirs],
        "labels": ["seed 1", "seed 2"],
        "out_dir": str(tmp_path),
    }
    path = execute("06_compare_runs", tmp_path, params, kernel=ensure_kernel())
    outputs = [o for c in json.loads(Path(path).read_text())["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join("".join(o.get("text", "")) for o in outputs)
    for c in compare.compare_runs(views):
        assert c.verdict in text
    assert compare.format_table(compare.difficulty_rows(views)) in text
    for name in ("compare_solve_rate", "compare_by_difficulty"):
        assert (tmp_path / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2
