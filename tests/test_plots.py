"""Plots: figures carry the data they were given, read run dirs, and refuse bad input clearly."""

import io
import json

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from rlkit.episodes.evaluate import KINDS, evaluate
from rlkit.episodes.policies import scripted_policy
from rlkit.errors import UsageError
from rlkit.maze.core import difficulty
from rlkit.maze.sets import pinned_set
from rlkit.notebook import curves, plots
from rlkit.run import open_run
from rlkit.run.rundir import RunDir


@pytest.fixture(scope="module")
def evals():
    """Real eval results at three 'checkpoints' (scripted policies of rising skill)."""
    out = {}
    for step, eps in ((0, 1.0), (10, 0.5), (20, 0.0)):
        out[step], _ = evaluate(scripted_policy(f"eps-oracle:{eps}"), samples=2, step=step)
    return out


def texts(fig: Figure) -> str:
    return " ".join(t.get_text() for t in fig.texts + [fig._suptitle] if t is not None)


def test_run_evals_and_metrics_roundtrip(tmp_path, evals):
    run = RunDir(tmp_path / "run")
    for step, r in evals.items():
        d = r.to_dict()
        d["step"] = None  # older writers left it out: the file name must supply it
        run.eval_path(step).parent.mkdir(parents=True, exist_ok=True)
        run.eval_path(step).write_text(json.dumps(d))
    for s in range(3):
        run.append_metrics({"step": s, "rollout/reward_mean": s / 2})
    loaded = open_run(run.path).evals()
    assert list(loaded) == [0, 10, 20]
    assert [r.step for r in loaded.values()] == [0, 10, 20]
    assert loaded[10].solve_rate == evals[10].solve_rate and loaded[10].ci95 == evals[10].ci95
    assert plots.load_metrics(run.path) == plots.load_metrics(run.metrics_path)
    assert [m["rollout/reward_mean"] for m in plots.load_metrics(run.path)] == [0, 0.5, 1.0]
    assert plots.load_metrics(tmp_path / "not-yet") == []
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(UsageError, match="not a run directory"):
        plots.load_metrics(tmp_path / "other.txt")


def test_solve_rate_curve_draws_rates_bands_baseline_and_boundary(evals):
    base = evals[0]
    fig = plots.solve_rate_curve(evals, baseline=base, warm_start_end=10, run_id="r7")
    ax = fig.axes[0]
    curve = next(
        line for line in ax.lines if line.get_label().startswith("solve rate, rlkit's protocol")
    )
    assert list(curve.get_xdata()) == [0, 10, 20]
    assert list(curve.get_ydata()) == [evals[s].solve_rate for s in (0, 10, 20)]
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(min(r.ci95[0] for r in evals.values()))
    assert band[:, 1].max() == pytest.approx(max(r.ci95[1] for r in evals.values()))
    assert ax.collections[0].get_label() == "95% CI (wilson-maze-deff)"
    labels = [line.get_label() for line in ax.lines]
    assert any(lbl.startswith("baseline eps-oracle:1") for lbl in labels)
    boundary = next(line for line in ax.lines if "GRPO from step 10" in line.get_label())
    assert list(boundary.get_xdata()) == [10, 10]
    header = texts(fig)
    assert "run r7" in header and "64 mazes x 2 samples/maze" in header
    # a list works when results carry their step; a float baseline draws a plain line
    fig2 = plots.solve_rate_curve(list(evals.values()), baseline=0.4375)
    assert any(line.get_label() == "baseline: 43.8%" for line in fig2.axes[0].lines)


def test_solve_rate_curve_refuses_unplottable_input(evals):
    r = evals[0]
    with pytest.raises(UsageError, match="no eval results"):
        plots.solve_rate_curve({})
    stepless = type(r)(**{**r.to_dict(), "ci95": r.ci95, "step": None})
    with pytest.raises(UsageError, match="has no step"):
        plots.solve_rate_curve([stepless])
    with pytest.raises(UsageError, match=r"baseline \(1.5\)"):
        plots.solve_rate_curve(evals, baseline=1.5)


def test_phase_spans_hand_computed():
    records = [
        {"step": 0, "train/phase": "warm_start"},
        {"step": 1, "train/phase": "warm_start"},
        {"step": 2},  # no phase: ignored, does not split a span
        {"step": 3, "phase": "grpo"},
        {"step": 5, "phase": "grpo"},
    ]
    assert curves.phase_spans(records) == [("warm_start", 0, 1), ("grpo", 3, 5)]


def test_training_curves_skips_absent_panels_and_tolerates_missing_keys(tmp_path):
    records = []
    for s in range(12):
        r = {"step": s, "train/phase": "warm_start" if s < 4 else "grpo"}
        r["rollout/reward_mean"] = s / 11
        if s % 2 == 0:  # logged every other step only
            r["loss/total"] = 1.0 - s / 11
        r["loss/kl"] = None if s == 3 else 0.01 * s
        r["timing/rollout"] = 0.5
        records.append(r)
    fig = curves.training_curves(records, run_id="t")
    names = [ax.get_ylabel() for ax in fig.axes]
    assert names == ["reward / solve rate", "loss", "KL"]  # no entropy or turns logged
    loss = fig.axes[1].lines[0]
    assert list(loss.get_xdata()) == [0, 2, 4, 6, 8, 10]
    kl = fig.axes[2].lines[0]
    assert 3 not in list(kl.get_xdata())  # the None value is skipped, not plotted as 0
    assert "warm_start" in [t.get_text() for t in fig.axes[0].texts]
    # the same from a file
    run = RunDir(tmp_path / "run")
    for r in records:
        run.append_metrics(r)
    from_file = curves.training_curves(run.metrics_path)
    assert [ax.get_ylabel() for ax in from_file.axes] == names


def test_curves_draw_each_step_once_with_its_last_values():
    """A step can have several records: the local trainer and SkyRL log an eval next to the
    step's training record, and a run resumed before its metrics were cut logs steps again.
    The curves merge them per step; a later value wins."""
    records = [
        {"step": 0, "eval/solve_rate": 0.1},
        {"step": 1, "rollout/reward_mean": 0.2, "loss/total": 1.0},
        {"step": 2, "rollout/reward_mean": 0.3, "loss/total": 0.9},
        {"step": 2, "eval/solve_rate": 0.4},  # the eval at step 2, its own record
        {"step": 3, "rollout/reward_mean": 0.0, "loss/total": 5.0},  # lost when the run died
        {"step": 3, "rollout/reward_mean": 0.5, "loss/total": 0.8},  # step 3 after the resume
    ]
    reward, loss = curves.training_curves(records).axes
    lines = {ln.get_label(): ln for ln in reward.lines}
    assert list(lines["rollout/reward_mean"].get_xdata()) == [1, 2, 3]
    assert list(lines["rollout/reward_mean"].get_ydata()) == [0.2, 0.3, 0.5]
    assert list(lines["eval/solve_rate"].get_xdata()) == [0, 2]
    assert list(loss.lines[0].get_ydata()) == [1.0, 0.9, 0.8]
    live = {ln.get_label(): ln for ln in curves.live_curves(records).axes[0].lines}
    assert list(live["rollout/reward_mean"].get_ydata()) == [0.2, 0.3, 0.5]
    assert curves.merge_steps(records) == [
        {"step": 0, "eval/solve_rate": 0.1},
        {"step": 1, "rollout/reward_mean": 0.2, "loss/total": 1.0},
        {"step": 2, "rollout/reward_mean": 0.3, "loss/total": 0.9, "eval/solve_rate": 0.4},
        {"step": 3, "rollout/reward_mean": 0.5, "loss/total": 0.8},
    ]


def test_training_curves_refuses_nothing_to_plot():
    with pytest.raises(UsageError, match="not logged a step"):
        curves.training_curves([])
    with pytest.raises(UsageError, match="no plottable metrics"):
        curves.training_curves([{"step": 0, "timing/rollout": 1.0}])


def test_by_difficulty_one_series_per_result(evals):
    fig = plots.by_difficulty({"random": evals[0], "oracle": evals[20]})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["random", "oracle"]
    series = [c.lines[0] for c in ax.containers]  # each errorbar's data line
    assert [c.get_label() for c in ax.containers] == ["random", "oracle"]
    want = [
        cell["solve_rate"]
        for _, cell in sorted(evals[0].by_path_length.items(), key=lambda kv: int(kv[0]))
    ]
    assert list(series[0].get_ydata()) == want
    assert set(series[1].get_ydata()) == {1.0}
    single = plots.by_difficulty(evals[10])
    assert single.axes[0].get_legend().get_texts()[0].get_text() == "step 10"
    assert "95% CI wilson-maze-deff" in texts(fig)


def test_failure_breakdown_bars_match_counts(evals):
    r = evals[0]
    fig = plots.failure_breakdown(r)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [r.failures[k] for k in KINDS]
    assert sum(heights) == round((1 - r.solve_rate) * r.n_mazes * r.samples)
    custom = plots.failure_breakdown({"loop": 3, "timeout": 1, "other": 2})
    assert [p.get_height() for p in custom.axes[0].patches] == [0, 3, 0, 0, 1, 2]


def test_maze_gallery_titles_state_difficulty():
    mazes = pinned_set()[:5]
    fig = plots.maze_gallery(mazes, cols=3)
    shown = [ax for ax in fig.axes if ax.images]
    assert len(shown) == 5 and len(fig.axes) == 6
    d = difficulty(mazes[4])
    assert shown[4].get_title() == f"#4 L{d.path_length} J{d.junctions} T{d.turns}"
    assert all(ax.get_title() == "" for ax in plots.maze_gallery(mazes, stats=False).axes)
    with pytest.raises(UsageError):
        plots.maze_gallery([])


def test_figures_render_as_png_without_pyplot(evals):
    fig = curves.live_curves([{"step": 0, "rollout/reward_mean": 0.2}], evals)
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.asarray(Image.open(io.BytesIO(png))).std() > 0  # not a blank canvas
    empty = curves.live_curves([])
    assert "waiting for the first step" in empty.axes[0].texts[0].get_text()


def _legend_labels(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_equal_series_are_drawn_once_and_named_together():
    """With a 0/1 reward the mean reward is the solve rate, and without KL the total loss is
    the policy loss: one line each, both names on it, nothing hidden under it."""
    records = [
        {
            "step": s,
            "rollout/reward_mean": s / 10,
            "rollout/solve_rate": s / 10,
            "loss/policy": -s,
            "loss/total": -s,
            "loss/bc": 1.0 / (s + 1),
            "train/phase": "grpo",
        }
        for s in range(5)
    ]
    fig = curves.training_curves(records)
    reward, loss = fig.axes[:2]
    assert _legend_labels(reward) == ["rollout/reward_mean = rollout/solve_rate"]
    assert len(reward.lines) == 1
    assert _legend_labels(loss) == ["loss/bc", "loss/policy = loss/total"]
    live = curves.live_curves(records)
    assert _legend_labels(live.axes[0]) == ["rollout/reward_mean = rollout/solve_rate"]
    assert live.axes[0].get_title(loc="left") == "Training progress"
    assert live.axes[0].get_ylabel() and live.axes[0].get_xlabel() == "training step"


def test_legends_sit_outside_the_data(evals):
    figures = (
        plots.by_difficulty(evals),
        curves.training_curves([{"step": 1, "loss": 2.0}]),
        plots.solve_rate_curve(evals, baseline=0.25, warm_start_end=1),
    )
    for fig in figures:
        ax = fig.axes[0]
        fig.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 >= ax.get_window_extent().x1  # right of the axes, over no point
