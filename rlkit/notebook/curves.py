"""Training curves from metrics.jsonl: the notebook's panels (each takes every metric whose name
matches; the warm start shaded) and the job monitor's live figure.

    fig = curves.training_curves("runs/demo/local-tiny", run_id="demo")   # reward, loss, KL, ...
    fig = curves.stability_curves(run)       # entropy, clip fraction, zero-variance share, ...
"""

from __future__ import annotations

import re
import statistics
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import UsageError
from rlkit.notebook.plots import (
    PlotFigure,
    ci_methods,
    ci_yerr,
    distinct_series,
    figure_header,
    legend_outside,
    load_metrics,
)
from rlkit.run import Run
from rlkit.run.stability import (
    CONVERGED_SOLVE,
    ENTROPY_COLLAPSE_FRACTION,
    LOGPROB_GAP_LIMIT,
    PHASE_KEYS,
    SIGNALS,
    SOLVE,
    finite_number,
    grpo_entropies,
    grpo_series,
    merge_steps,
    resolve,
    stability_notes,
    stability_warnings,
    with_derived,
)


def _base(key: str) -> str:
    return key.rsplit("/", 1)[-1]


PANELS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("reward / solve rate", lambda k: _base(k) in {"reward", "reward_mean", "solve_rate", "solve"}),
    (
        "loss",
        lambda k: k == "loss" or (k.startswith("loss/") and _base(k) in {"total", "policy", "bc"}),
    ),
    ("KL", lambda k: re.search(r"(^|_)kl(_|$)", _base(k)) is not None),
    ("entropy", lambda k: "entropy" in _base(k)),
    ("turns", lambda k: _base(k).startswith("turns")),
)


def _series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        y = finite_number(r.get(key))
        if y is not None and isinstance(r.get("step"), int):
            xs.append(r["step"])
            ys.append(y)
    return xs, ys


def phase_spans(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, int]]:
    """Contiguous (phase, first_step, last_step) runs from a `phase`/`train/phase` field."""
    spans: list[tuple[str, int, int]] = []
    for r in records:
        phase = next((r[k] for k in PHASE_KEYS if isinstance(r.get(k), str)), None)
        step = r.get("step")
        if phase is None or not isinstance(step, int):
            continue
        if spans and spans[-1][0] == phase:
            spans[-1] = (phase, spans[-1][1], step)
        else:
            spans.append((phase, step, step))
    return spans


def _stacked(n: int, panel_in: float, extra_in: float) -> tuple[Figure, Sequence[Axes]]:
    fig = PlotFigure(figsize=(10, panel_in * n + extra_in))
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    axes[-1].set_xlabel("training step")
    return fig, axes


def _mark_phases(axes: Sequence[Axes], records: Sequence[Mapping[str, Any]]) -> None:
    """Shade each non-GRPO phase, mark where each phase starts and name it."""
    spans = phase_spans(records)
    for i, (phase, first, last) in enumerate(spans):
        end = spans[i + 1][1] if i + 1 < len(spans) else last
        for ax in axes:
            if "grpo" not in phase.lower():
                ax.axvspan(first, end, color="C1", alpha=0.08)
            if i > 0:
                ax.axvline(first, color="C1", ls=":", lw=1)
        axes[0].text(
            (first + end) / 2,
            1.01,
            phase,
            transform=axes[0].get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=7,
            color="C1",
        )


def training_curves(
    metrics: Sequence[Mapping[str, Any]] | str | Path | Run, *, run_id: str | None = None
) -> Figure:
    """Reward, loss, KL, entropy and turns vs step of a run, its dir, or its records."""
    records = _records(metrics)
    if not records:
        raise UsageError("no metric records to plot: the run has not logged a step yet")
    keys = sorted({k for r in records for k in r if k != "step"})
    panels = []
    for name, match in PANELS:
        series = [(k, *_series(records, k)) for k in keys if match(k)]
        series = [s for s in series if s[1]]
        if series:
            panels.append((name, series))
    if not panels:
        raise UsageError(
            f"no plottable metrics (reward, loss, kl, entropy, turns) among keys {keys[:12]}"
        )
    fig, axes = _stacked(len(panels), 1.9, 1.0)
    for ax, (name, series) in zip(axes, panels, strict=True):
        for key, xs, ys in distinct_series(series):
            ax.plot(xs, ys, lw=1.3, marker="." if len(xs) < 40 else None, label=key)
        ax.set_ylabel(name, fontsize=9)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    fig.subplots_adjust(left=0.08, right=0.68, hspace=0.15)
    _mark_phases(axes, records)
    steps = [r["step"] for r in records if isinstance(r.get("step"), int)]
    detail = f"{len(records)} steps logged ({min(steps, default=0)}-{max(steps, default=0)})"
    figure_header(fig, "Training curves", run_id, detail)
    return fig


def _records(metrics: Sequence[Mapping[str, Any]] | str | Path | Run) -> list[dict[str, Any]]:
    if isinstance(metrics, Run):
        metrics = metrics.metrics()
    return merge_steps(load_metrics(metrics) if isinstance(metrics, str | Path) else metrics)


def stability_curves(
    metrics: Sequence[Mapping[str, Any]] | str | Path | Run, *, run_id: str | None = None
) -> Figure:
    """The stability signals vs step with their thresholds; the header names each warning."""
    records = [with_derived(r) for r in _records(metrics)]
    found = resolve(records)
    if not found:
        raise UsageError(
            f"no stability metrics in this run (looked for {', '.join(SIGNALS)}): it has not "
            "logged a training step yet"
        )
    fig, axes = _stacked(len(found), 1.7, 1.2)
    for ax, (name, keys) in zip(axes, found.items(), strict=True):
        for key in keys:
            xs, ys = _series(records, key)
            ax.plot(xs, ys, lw=1.3, marker="." if len(xs) < 40 else None, label=key)
        if name == "entropy":
            _entropy_context(ax, records)
        if name.startswith("rollout-trainer"):
            ax.axhline(LOGPROB_GAP_LIMIT, color="C3", ls="--", lw=1, label="warning limit")
        ax.set_ylabel(textwrap.fill(name, 16), fontsize=8)
        ax.grid(alpha=0.3)
        legend_outside(ax, fontsize=7.5)
    fig.subplots_adjust(left=0.08, right=0.66, hspace=0.15)
    _mark_phases(axes, records)
    warnings = [w.split(":")[0] for w in stability_warnings(records)]  # the full lines: monitor
    notes = [n.split(":")[0] for n in stability_notes(records)]
    detail = f"{len(records)} steps  |  " + (
        "; ".join(warnings) or "; ".join([*notes, "no stability warning"])
    )
    figure_header(fig, "Stability", run_id, detail)
    return fig


def _entropy_context(ax: Axes, records: Sequence[Mapping[str, Any]]) -> None:
    """The entropy panel's floor, and the rollout solve rate (right axis) with its converged level."""
    entropies = grpo_entropies(records)
    if entropies and entropies[0][1] > 0:
        floor = ENTROPY_COLLAPSE_FRACTION * entropies[0][1]
        label = f"{ENTROPY_COLLAPSE_FRACTION:.0%} of GRPO's start"
        ax.axhline(floor, color="C3", ls="--", lw=1, label=label)
    key = next((k for k in SOLVE if _series(records, k)[0]), None)
    if key is None:
        return
    solve = ax.twinx()
    xs, ys = _series(records, key)
    solve.plot(xs, ys, color="0.55", lw=1, ls=":")
    solve.axhline(CONVERGED_SOLVE, color="0.55", lw=0.8, ls="-.")
    solve.set_ylim(-0.02, 1.05)
    solve.tick_params(labelsize=7)
    label = f"{key} (right; converged >= {CONVERGED_SOLVE:.0%})"
    ax.plot([], [], color="0.55", lw=1, ls=":", label=label)  # the legend's entry for it


def live_curves(
    metrics: Sequence[Mapping[str, Any]],
    evals: Mapping[int, EvalResult] | None = None,
    *,
    run_id: str | None = None,
) -> Figure:
    """The job monitor's figure (720x300 px): rollout metrics and evals with intervals."""
    fig = PlotFigure(figsize=(7.2, 3.0))
    ax = fig.add_subplot()
    keys = ("rollout/reward_mean", "rollout/solve_rate", "eval/solve_rate")
    records = merge_steps(metrics)
    series = [(k, *_series(records, k)) for k in keys]
    for key, xs, ys in distinct_series([s for s in series if s[1]]):
        ax.plot(xs, ys, lw=1.3, label=key)
    if evals:
        steps, results = zip(*sorted(evals.items()), strict=True)
        rates = [r.solve_rate for r in results]
        yerr = ci_yerr(rates, [r.ci95 for r in results])
        label = f"test set (95% CI, {ci_methods(results)})"
        ax.errorbar(steps, rates, yerr=yerr, fmt="ks", ms=4, capsize=3, label=label)
    title = "Training progress" + (f": {run_id}" if run_id else "")
    ax.set_title(title, fontsize=10, loc="left")
    if not ax.lines and not ax.collections:
        ax.text(0.5, 0.5, "waiting for the first step...", ha="center", transform=ax.transAxes)
    else:
        legend_outside(ax, fontsize=7.5)
    ax.set(xlabel="training step", ylabel="rate (0-1)", ylim=(-0.02, 1.05))
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.09, right=0.62, bottom=0.17, top=0.88)
    return fig


EARLY_STEPS = 50
"""GRPO steps `signal_lines` summarises at each end of a run."""

READ_SIGNALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("KL to the reference", ("loss/kl",)),
    ("clip fraction", SIGNALS["clip fraction"]),
    ("entropy", SIGNALS["entropy"]),
)
"""The signals whose healthy level depends on the model and step size: read from the run."""


@dataclass(frozen=True)
class SignalSpan:
    """One signal over a run's GRPO steps, as `signal_lines` prints it."""

    name: str
    key: str
    steps: tuple[int, ...]
    values: tuple[float, ...]

    @property
    def early(self) -> tuple[float, ...]:
        return self.values[:EARLY_STEPS]

    @property
    def late(self) -> tuple[float, ...]:
        return self.values[-EARLY_STEPS:]

    def line(self) -> str:
        if not self.values:
            return f"{self.name} (`{self.key}`): not logged by this run's GRPO steps"
        v = self.values
        text = (
            f"{self.name} (`{self.key}`) over {len(v)} GRPO steps ({self.steps[0]}-"
            f"{self.steps[-1]}): {v[0]:.3g} at the first, median {statistics.median(self.early):.3g}"
            f" over the first {len(self.early)} and {statistics.median(self.late):.3g} over the "
            f"last {len(self.late)}, range {min(v):.3g}-{max(v):.3g}"
        )
        if self.name == "entropy" and v[0] > 0:
            text += (
                f"; the last is {v[-1] / v[0]:.0%} of the first (below "
                f"{ENTROPY_COLLAPSE_FRACTION:.0%}, the fall is judged: convergence or collapse)"
            )
        return text


def signal_spans(metrics: Sequence[Mapping[str, Any]] | str | Path | Run) -> list[SignalSpan]:
    """KL, clip fraction and entropy over the run's GRPO steps (`READ_SIGNALS`)."""
    records = _records(metrics)
    spans = []
    for name, keys in READ_SIGNALS:
        series = grpo_series(records, keys)
        steps, values = tuple(s for s, _ in series), tuple(v for _, v in series)
        spans.append(SignalSpan(name, keys[0], steps, values))
    return spans


def signal_lines(metrics: Sequence[Mapping[str, Any]] | str | Path | Run) -> list[str]:
    """Notebook 04's line per signal: first value, medians of the first/last `EARLY_STEPS`, range."""
    return [span.line() for span in signal_spans(metrics)]
