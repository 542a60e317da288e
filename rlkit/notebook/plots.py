"""Figures for runs and evaluations on matplotlib's object API (`PlotFigure`, never pyplot);
every solve rate is drawn with its stored 95% interval.

    fig = plots.solve_rate_curve(run.evals(), baseline=0.4375)
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image

from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.failures import KINDS
from rlkit.errors import UsageError
from rlkit.maze.core import Maze, difficulty
from rlkit.maze.render import RenderStyle, render_maze
from rlkit.run import run_or_none

Evals = Sequence[EvalResult] | Mapping[int, EvalResult]
GALLERY_STYLE = RenderStyle(view="full", cell_px=16)


class PlotFigure(Figure):
    """A Figure that Jupyter displays as PNG without pyplot's inline backend."""

    def _repr_png_(self) -> bytes:
        return figure_png(self)


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_width(png: bytes) -> int:
    """A PNG's width in pixels."""
    return Image.open(io.BytesIO(png)).width


def load_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl records (a run dir or the file); [] before the run dir exists."""
    path = Path(run_dir)
    run = run_or_none(path.parent if path.name == "metrics.jsonl" else path)
    return run.metrics() if run is not None else []


def _by_step(evals: Evals) -> tuple[tuple[int, ...], tuple[EvalResult, ...]]:
    if isinstance(evals, Mapping):
        pairs = [(int(s), r) for s, r in evals.items()]
    else:
        pairs = []
        for i, r in enumerate(evals):
            if r.step is None:
                raise UsageError(
                    f"eval result {i} ({r.policy}) has no step: pass a dict {{step: result}}"
                )
            pairs.append((r.step, r))
    if not pairs:
        raise UsageError("no eval results to plot: evaluate a checkpoint first")
    return tuple(zip(*sorted(pairs, key=lambda p: p[0]), strict=True))


def _counts_line(results: Sequence[EvalResult]) -> str:
    """`64 mazes x 4 samples/maze` (ranges when the results differ)."""

    def span(values: set[int]) -> str:
        return str(min(values)) if len(values) == 1 else f"{min(values)}-{max(values)}"

    mazes = span({r.n_mazes for r in results})
    samples = span({r.samples for r in results})
    return f"{mazes} mazes x {samples} samples/maze, set '{results[0].set}'"


def ci_methods(results: Sequence[EvalResult]) -> str:
    """The interval method(s) behind the results' bands, for a legend."""
    return ", ".join(sorted({r.ci_method for r in results}))


def ci_yerr(rates: Sequence[float], cis: Sequence[Sequence[float]]) -> list[list[float]]:
    """`errorbar`'s yerr: each interval's distances below and above its rate, never negative."""
    pairs = list(zip(rates, cis, strict=True))
    return [[max(0.0, p - ci[0]) for p, ci in pairs], [max(0.0, ci[1] - p) for p, ci in pairs]]


def band_curve(
    ax: Axes, xs: Sequence, results: Sequence[EvalResult], fmt: str, alpha: float, **kw: Any
) -> None:
    """The results' solve rates at `xs`, a `fmt` line (`kw`: `Axes.plot`'s, `color` required) over
    the band of their 95% intervals (labelled `band`, when given)."""
    lo, hi = [r.ci95[0] for r in results], [r.ci95[1] for r in results]
    ax.fill_between(xs, lo, hi, alpha=alpha, color=kw["color"], label=kw.pop("band", None))
    ax.plot(xs, [r.solve_rate for r in results], fmt, **kw)


def figure_header(fig: Figure, title: str, run_id: str | None, detail: str) -> None:
    """Title plus a line naming the run and the data behind the picture."""
    height = fig.get_figheight()
    fig.suptitle(title, fontsize=12, fontweight="bold", y=1 - 0.12 / height, va="top")
    run = f"run {run_id}  |  " if run_id else ""
    fig.text(0.5, 1 - 0.42 / height, run + detail, ha="center", va="top", fontsize=8.5, color="0.3")
    fig.subplots_adjust(top=1 - 0.95 / height)


def legend_outside(ax: Axes, fontsize: float = 8) -> None:
    """The legend right of the axes, where it covers no data."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def distinct_series(
    series: Sequence[tuple[str, list[int], list[float]]],
) -> list[tuple[str, list[int], list[float]]]:
    """Series with identical points merged into one, their names joined with ' = '."""
    out: list[tuple[str, list[int], list[float]]] = []
    for key, xs, ys in series:
        same = next((i for i, (_, x, y) in enumerate(out) if x == xs and y == ys), None)
        if same is None:
            out.append((key, xs, ys))
        else:
            out[same] = (f"{out[same][0]} = {key}", xs, ys)
    return out


def solve_rate_curve(
    evals: Evals,
    *,
    baseline: EvalResult | float | None = None,
    warm_start_end: int | None = None,
    title: str = "Solve rate across checkpoints",
    run_id: str | None = None,
    others: Mapping[str, Evals] | None = None,
) -> Figure:
    """Solve rate vs step with 95% bands, a baseline and the warm-start/GRPO boundary; `others`:
    the run's other eval sets, a curve each."""
    steps, results = _by_step(evals)
    last_step, last = steps[-1], results[-1]
    fig = PlotFigure(figsize=(10, 4.2))
    ax = fig.add_subplot()
    named = f"{last.set}, " if others else ""
    label, band = f"solve rate, {named}{last.protocol_label}", f"95% CI ({ci_methods(results)})"
    band_curve(ax, steps, results, "o-", 0.25, color="C0", label=label, band=band)
    for i, (name, other) in enumerate((others or {}).items(), start=2):
        xs, more = _by_step(other)
        label = f"solve rate, {name}, {more[-1].protocol_label}"
        band_curve(ax, xs, more, "s--", 0.15, color=f"C{i}", label=label)
    high = last.solve_rate > 0.9  # near the top: below the point, else above it
    ax.annotate(  # left of the last point, so the label stays inside the axes
        f"{last.solve_rate:.1%}",
        (last_step, last.solve_rate),
        textcoords="offset points",
        xytext=(-4, -6 if high else 6),
        ha="right",
        va="top" if high else "bottom",
        fontsize=8,
    )
    if isinstance(baseline, EvalResult):
        ax.axhspan(*baseline.ci95, color="0.5", alpha=0.12)
        label = f"baseline {baseline.policy}: {baseline.solve_rate:.1%}"
        ax.axhline(baseline.solve_rate, color="0.35", ls="--", label=label)
    elif baseline is not None:
        if not 0.0 <= baseline <= 1.0:
            raise UsageError(f"baseline ({baseline}) must be a solve rate in [0, 1]")
        ax.axhline(baseline, color="0.35", ls="--", label=f"baseline: {baseline:.1%}")
    if warm_start_end is not None:
        ax.axvspan(min(steps[0], warm_start_end), warm_start_end, color="C1", alpha=0.1)
        ax.axvline(warm_start_end, color="C1", ls=":", label=f"GRPO from step {warm_start_end}")
        ax.text(warm_start_end, 1.02, " warm start | GRPO ", ha="center", fontsize=7, color="C1")
    ax.set(xlabel="training step", ylabel="solve rate", ylim=(0, 1.08))
    ax.grid(alpha=0.3)
    legend_outside(ax)
    fig.subplots_adjust(right=0.7)
    figure_header(fig, title, run_id, _counts_line(results))
    return fig


def _labelled(evals: EvalResult | Evals) -> list[tuple[str, EvalResult]]:
    if isinstance(evals, Mapping):
        return [(k if isinstance(k, str) else f"step {k}", r) for k, r in evals.items()]
    results = [evals] if isinstance(evals, EvalResult) else evals
    return [(r.policy if r.step is None else f"step {r.step}", r) for r in results]


def by_difficulty(
    evals: EvalResult | Evals | Mapping[str, EvalResult], *, run_id: str | None = None
) -> Figure:
    """Solve rate per shortest-path length with 95% bars, a series per checkpoint or policy (dict
    keys: ints are steps, strings labels)."""
    labelled = _labelled(evals)
    if not labelled:
        raise UsageError("no eval results to plot: evaluate a checkpoint first")
    lengths = sorted({int(n) for _, r in labelled for n in r.by_path_length})
    if not lengths:
        raise UsageError("eval results hold no per-path-length breakdown: re-run the evaluation")
    fig = PlotFigure(figsize=(9.5, 4.2))
    ax = fig.add_subplot()
    width = 0.7 / len(labelled)
    for i, (label, r) in enumerate(labelled):
        shown = [n for n in lengths if str(n) in r.by_path_length]
        cells = [r.by_path_length[str(n)] for n in shown]
        xs = [n + (i - (len(labelled) - 1) / 2) * width for n in shown]
        ys = [cell["solve_rate"] for cell in cells]
        yerr = ci_yerr(ys, [cell["ci95"] for cell in cells])
        ax.errorbar(xs, ys, yerr=yerr, fmt="o-", capsize=3, ms=4, label=label)
    first = labelled[0][1].by_path_length
    ax.set_xticks(lengths)
    ax.set_xticklabels([f"{n}\n({first.get(str(n), {}).get('episodes', 0)} ep)" for n in lengths])
    ax.set(xlabel="shortest-path length (moves)", ylabel="solve rate", ylim=(-0.02, 1.08))
    ax.grid(alpha=0.3)
    legend_outside(ax)
    fig.subplots_adjust(right=0.74)
    results = [r for _, r in labelled]
    detail = f"{_counts_line(results)}; 95% CI {ci_methods(results)}"
    figure_header(fig, "Solve rate by difficulty", run_id, detail)
    return fig


def failure_breakdown(
    result: EvalResult | Mapping[str, int], *, title: str | None = None
) -> Figure:
    """Bars of failure kinds (counts and share of failed episodes)."""
    counts = result.failures if isinstance(result, EvalResult) else dict(result)
    kinds = list(KINDS) + sorted(set(counts) - set(KINDS))
    values = [int(counts.get(k, 0)) for k in kinds]
    failed = sum(values)
    fig = PlotFigure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    bars = ax.bar(kinds, values, color=[f"C{i}" for i in range(len(kinds))])
    labels = [f"{v} ({v / failed:.0%})" if failed else str(v) for v in values]
    ax.bar_label(bars, labels, padding=2, fontsize=8)
    ax.set(ylabel="failed episodes", ylim=(0, max(values + [1]) * 1.2))
    ax.tick_params(axis="x", labelsize=8)
    if isinstance(result, EvalResult):
        heading = title or f"Failures of {result.policy}"
        episodes = result.n_mazes * result.samples
        detail = f"{failed} of {episodes} episodes failed; {_counts_line([result])}"
    else:
        heading, detail = title or "Failures", f"{failed} failed episodes"
    figure_header(fig, heading, None, detail)
    return fig


def maze_gallery(
    mazes: Sequence[Maze],
    stats: bool = True,
    *,
    cols: int = 8,
    title: str = "Test mazes",
) -> Figure:
    """A grid of mazes, titled with path length (L), junctions (J) and turns (T) with `stats`."""
    if not mazes:
        raise UsageError("maze_gallery needs at least one maze")
    cols = max(1, min(cols, len(mazes)))
    rows = -(-len(mazes) // cols)
    fig = PlotFigure(figsize=(1.6 * cols, 1.75 * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for i, ax in enumerate(axes):
        ax.set_axis_off()
        if i >= len(mazes):
            continue
        ax.imshow(render_maze(mazes[i], GALLERY_STYLE), interpolation="nearest")
        if stats:
            d = difficulty(mazes[i])
            ax.set_title(f"#{i} L{d.path_length} J{d.junctions} T{d.turns}", fontsize=7)
    shape = {f"{m.height}x{m.width}" for m in mazes}
    detail = f"{len(mazes)} mazes, {'/'.join(sorted(shape))}; L path length, J junctions, T turns"
    figure_header(fig, title, None, detail if stats else f"{len(mazes)} mazes")
    fig.subplots_adjust(hspace=0.35)
    return fig
