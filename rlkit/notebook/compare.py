"""Several runs side by side (notebook 06): curves, difficulty, paired tests on the mazes and
samples both have (docs/reading-runs.md: reading a verdict).

    views = compare.load_runs(["runs/demo/local-tiny", "runs/demo/smoke"], labels=["tiny", "smoke"])
    for c in compare.compare_runs(views):         # final vs final, best vs best, maze by maze
        print(c.verdict)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_spec
from rlkit.notebook.paths import home, home_path, relative_rule
from rlkit.notebook.plots import PlotFigure, band_curve, by_difficulty, ci_methods, figure_header
from rlkit.run import Run, RunNotFound, is_run, open_run
from rlkit.stats import PairedByMaze, clustered_wilson, paired_by_maze

ALPHA = 0.05
"""The significance level every verdict states."""


@dataclass(frozen=True)
class RunView:
    """One run as the comparison reads it: its evals and the training time to reach them."""

    label: str
    run: Run
    evals: dict[int, EvalResult]
    wall_s: dict[int, float]
    """Step -> training seconds to the end of that step ({}: no timing logged)."""
    warm_start_end: int | None

    @property
    def final_step(self) -> int:
        return max(self.evals)

    @property
    def best_step(self) -> int:
        """The best trained checkpoint (the latest of equals), picked on the test set."""
        trained = [s for s in self.evals if s > 0] or list(self.evals)
        return max(trained, key=lambda s: (self.evals[s].solve_rate, s))

    def step_of(self, which: str) -> int:
        if which not in ("final", "best"):
            raise UsageError(f"which checkpoint: 'final' or 'best', not {which!r}")
        return self.final_step if which == "final" else self.best_step


def resolve_run(spec: str | Path | Run) -> Run:
    """A run from a path (relative: to `home()`) or a bare name found once under HOME/runs."""
    if isinstance(spec, Run):
        return spec
    path = home_path(spec)
    if path.exists() or len(Path(spec).parts) != 1:
        if not path.exists() and not Path(spec).expanduser().is_absolute():
            raise RunNotFound(f"no run at {path}: {relative_rule()}")
        return open_run(path)
    root = home() / "runs"
    found = sorted(p for p in root.glob(f"**/{spec}") if is_run(p))
    if len(found) > 1:
        raise UsageError(
            f"run name {spec!r} matches {len(found)} runs under {root}: give one path "
            f"({', '.join(str(p) for p in found[:4])})"
        )
    if not found:
        raise RunNotFound(
            f"no run at {path} and none named {spec!r} under {root}: {relative_rule()}"
        )
    return open_run(found[0])


def wall_clock(records: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """`RunView.wall_s`: `timing/elapsed_s` (local), else the sum of `timing/step` (SkyRL)."""
    logged = (k for k in ("timing/elapsed_s", "timing/step") if any(k in r for r in records))
    key = next(logged, None)
    if key is None:
        return {}
    cumulative = key == "timing/elapsed_s"  # else a step's own seconds, summed here
    total, out = 0.0, {}
    for r in sorted(records, key=lambda r: int(r.get("step", 0))):  # stable: file order kept
        step = int(r.get("step", 0))
        value = r.get(key)
        if isinstance(value, int | float):
            total = float(value) if cumulative else total + float(value)
        out[step] = total
    return out


def load_runs(
    runs: Sequence[str | Path | Run],
    labels: Sequence[str] | None = None,
    eval_set: str | None = None,
) -> list[RunView]:
    """Every run with its evals of `eval_set` (None: each run's first), labelled by name."""
    if isinstance(runs, str | Path):
        raise UsageError("runs: give a list of run dirs, e.g. ['runs/a', 'runs/b']")
    if labels is not None and len(labels) != len(runs):
        raise UsageError(f"{len(labels)} labels for {len(runs)} runs: give one label per run")
    views = []
    for i, spec in enumerate(runs):
        run = resolve_run(spec)
        evals = run.evals() if eval_set is None else run.evals_by_set().get(eval_set, {})
        if not evals and eval_set is not None:
            sets = ", ".join(run.evals_by_set()) or "none yet"
            raise UsageError(f"{run.path} has no evals of {eval_set}: its sets are {sets}")
        if not evals:
            raise UsageError(f"{run.path} has no evals yet: train or evaluate it first")
        records = run.metrics()
        label = str(labels[i]) if labels is not None else run.name
        views.append(RunView(label, run, evals, wall_clock(records), run.warm_start_end(records)))
    names = [v.label for v in views]
    if len(set(names)) != len(names):
        raise UsageError(f"runs share a label ({', '.join(names)}): pass labels=[...] to tell them")
    return views


def paired_outcomes(a: EvalResult, b: EvalResult) -> tuple[list[list[bool]], list[list[bool]]]:
    """A's and B's outcomes on the mazes both evaluated (A's order), the first k samples of each."""

    def keyed(r: EvalResult) -> dict[str, list[bool]]:
        return {m.get("hash") or f"{r.test_set_hash}:{m['index']}": m["solved"] for m in r.per_maze}

    ka, kb = keyed(a), keyed(b)
    common = [h for h in ka if h in kb]
    if not common:
        raise UsageError(
            f"{a.policy} and {b.policy} share no test maze (sets {a.set!r}, {b.set!r}): "
            "evaluate both on the same set"
        )
    k = min(a.samples, b.samples)
    return [list(ka[h][:k]) for h in common], [list(kb[h][:k]) for h in common]


@dataclass(frozen=True)
class Comparison:
    """B against A at one checkpoint each, maze by maze, and the sentence that says it."""

    label_a: str
    step_a: int
    label_b: str
    step_b: int
    which: str
    """"final" or "best"."""
    test: PairedByMaze
    mazes_a: int
    mazes_b: int
    samples_a: int
    samples_b: int

    @property
    def significant(self) -> bool:
        return self.test.p_value < ALPHA

    @property
    def verdict(self) -> str:
        """The mazes each solves that the other fails, the p-value and the 95% interval."""
        t, a, b = self.test, self.label_a, self.label_b
        head = f"{self.which} checkpoints ({a} step {self.step_a}, {b} step {self.step_b})"
        if t.b_better == 0 and t.a_better == 0:
            core = f"{b} and {a} solve exactly the same mazes"
        elif t.samples == 1:
            core = (
                f"{b} solves {_mazes(t.b_better)} {a} fails and fails {t.a_better} that {a} solves"
            )
        else:
            core = (
                f"{b} solves a larger share of its {t.samples} samples than {a} on "
                f"{_mazes(t.b_better)} and a smaller share on {t.a_better}"
            )
        sig = "significant" if self.significant else "not significant"
        lo, hi = t.ci95
        return (
            f"{head}: {core}; p={t.p_value:.2g}, {sig} at {ALPHA:.0%} ({b} - {a} = "
            f"{t.diff * 100:+.1f} points, 95% CI {lo * 100:+.1f} to {hi * 100:+.1f}, "
            f"{self._basis()})"
        )

    def _basis(self) -> str:
        m, k = self.test.n_mazes, self.test.samples
        basis = f"{_mazes(m)} x {k} sample{'s' if k != 1 else ''}"
        if m < max(self.mazes_a, self.mazes_b):
            basis += " both evaluated"
        if k < max(self.samples_a, self.samples_b):
            first = "sample" if k == 1 else f"{k} samples"
            basis += f" (the first {first} of each maze)"
        return basis

    def __str__(self) -> str:
        return self.verdict


def _mazes(n: int) -> str:
    return f"{n} maze{'s' if n != 1 else ''}"


def compare_checkpoints(a: RunView, b: RunView, which: str = "final") -> Comparison:
    """Is B's final (or best) checkpoint better than A's? Paired by maze."""
    sa, sb = a.step_of(which), b.step_of(which)
    ra, rb = a.evals[sa], b.evals[sb]
    oa, ob = paired_outcomes(ra, rb)
    return Comparison(
        a.label, sa, b.label, sb, which, paired_by_maze(oa, ob),
        ra.n_mazes, rb.n_mazes, ra.samples, rb.samples,
    )  # fmt: skip


def compare_runs(views: Sequence[RunView], reference: int | str = 0) -> list[Comparison]:
    """Every run against the reference: final vs final, then best vs best where a best differs."""
    if len(views) < 2:
        raise UsageError(f"comparing runs needs at least two, got {len(views)}")
    labels = [v.label for v in views]
    if isinstance(reference, str):
        if reference not in labels:
            raise UsageError(f"reference {reference!r} is none of the runs ({', '.join(labels)})")
        reference = labels.index(reference)
    if not 0 <= reference < len(views):
        raise UsageError(f"reference {reference} is not a run index (0-{len(views) - 1})")
    ref = views[reference]
    out = []
    for v in views:
        if v is ref:
            continue
        out.append(compare_checkpoints(ref, v, "final"))
        if ref.best_step != ref.final_step or v.best_step != v.final_step:
            out.append(compare_checkpoints(ref, v, "best"))
    return out


ONE_RUN = (
    "one run: nothing to compare it with yet. Train a second beside it (nothing of the first "
    "is touched), e.g. `rlkit train --preset smoke --run-dir runs/smoke` (seconds on 2 cores), "
    'then set runs = [..., "smoke"]'
)


def verdicts(views: Sequence[RunView], reference: int | str = 0) -> list[str]:
    """The verdict of every comparison (`compare_runs`); `ONE_RUN` for one run."""
    return [ONE_RUN] if len(views) == 1 else [c.verdict for c in compare_runs(views, reference)]


def difficulty_rows(views: Sequence[RunView], which: str = "final") -> list[dict[str, Any]]:
    """Per (maze size, path length), then "all": each run's solve rate, 95% CI and maze count."""
    cells: dict[tuple[str, int], dict[str, tuple[float, tuple[float, float], int]]] = {}
    totals = {}
    for v in views:
        r = v.evals[v.step_of(which)]
        spec = pinned_spec(r.set)
        size = f"{spec.height}x{spec.width}"
        groups: dict[int, list[list[bool]]] = {}
        for m in r.per_maze:
            groups.setdefault(int(m["path_length"]), []).append(m["solved"])
        for length, g in groups.items():
            y, n = [sum(s) for s in g], [len(s) for s in g]
            cell = (sum(y) / sum(n), clustered_wilson(y, n), len(g))
            cells.setdefault((size, length), {})[v.label] = cell
        totals[v.label] = (r.solve_rate, r.ci95, r.n_mazes)
    rows = [{"maze": size, "path": length, **cells[size, length]} for size, length in sorted(cells)]
    return [*rows, {"maze": "all", "path": None, **totals}]


def format_table(rows: Sequence[Mapping[str, Any]], labels: Sequence[str] | None = None) -> str:
    """`difficulty_rows` as aligned text, `42% [30-55] n=12` per run (n: mazes; '-': none)."""
    if not rows:
        raise UsageError("no rows to show")
    labels = list(labels or [k for k in rows[-1] if k not in ("maze", "path")])
    head = ["maze", "path"] + labels
    body = []
    for row in rows:
        line = [str(row["maze"]), "" if row["path"] is None else str(row["path"])]
        for label in labels:
            cell = row.get(label)
            if cell is None:
                line.append("-")
                continue
            rate, (lo, hi), n = cell
            line.append(f"{rate:.0%} [{lo:.0%}-{hi:.0%}] n={n}")
        body.append(line)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *body]
    )


def solve_rate_curves(
    views: Sequence[RunView], *, align: str = "step", title: str = "Solve rate, runs compared"
) -> Figure:
    """Each run's solve rate and 95% band by step (`align="grpo"`: from its GRPO start) and time."""
    if align not in ("step", "grpo"):
        raise UsageError(f"align: 'step' or 'grpo', not {align!r}")
    if not views:
        raise UsageError("no runs to plot: load_runs([...]) first")
    fig = PlotFigure(figsize=(13, 4.4))
    by_step, by_wall = fig.subplots(1, 2, sharey=True)
    untimed = []
    for i, v in enumerate(views):
        color, steps = f"C{i}", sorted(v.evals)
        shift = (v.warm_start_end or 0) if align == "grpo" else 0
        shown, xs = [v.evals[s] for s in steps], [s - shift for s in steps]
        label = f"{v.label} ({v.run.backend})"
        band_curve(by_step, xs, shown, "o-", 0.18, color=color, ms=4, label=label)
        if v.warm_start_end is not None and align == "step":
            by_step.axvline(v.warm_start_end, color=color, ls=":", lw=1)
        if v.wall_s:
            ws = [v.wall_s.get(s, _wall_before(v.wall_s, s)) for s in steps]
            band_curve(by_wall, ws, shown, "o-", 0.18, color=color, ms=4, label=v.label)
        else:
            untimed.append(v.label)
    xlabel = "training step" if align == "step" else "GRPO step (0: end of warm start)"
    by_step.set(xlabel=xlabel, ylabel="solve rate", ylim=(0, 1.08))
    by_wall.set(xlabel="training wall time (s, the trainer's own timing)")
    if untimed:
        by_wall.text(0.5, 0.5, f"no timing logged: {', '.join(untimed)}", ha="center",
                     transform=by_wall.transAxes, fontsize=8, color="0.4")  # fmt: skip
    for ax in (by_step, by_wall):
        ax.grid(alpha=0.3)
    by_step.legend(fontsize=8, loc="upper left", bbox_to_anchor=(2.12, 1.0), borderaxespad=0)
    fig.subplots_adjust(right=0.8, wspace=0.08)
    results = [r for v in views for r in v.evals.values()]
    marks = "; dotted: warm start ends" if align == "step" else ""
    detail = f"{len(views)} runs; bands: 95% CI ({ci_methods(results)}){marks}"
    figure_header(fig, title, None, detail)
    return fig


def _wall_before(wall: Mapping[int, float], step: int) -> float:
    return max((t for s, t in wall.items() if s <= step), default=0.0)


def difficulty_figure(views: Sequence[RunView], which: str = "final") -> Figure:
    """Each run's final (or best) checkpoint by shortest-path length."""
    return by_difficulty(
        {f"{v.label} ({which}, step {v.step_of(which)})": v.evals[v.step_of(which)] for v in views}
    )


def describe(views: Sequence[RunView]) -> str:
    """One line per run: backend, evals, final and best checkpoints and their rates."""
    lines = []
    for v in views:
        f, b = v.evals[v.final_step], v.evals[v.best_step]
        wall = f", {v.wall_s[max(v.wall_s)]:.0f} s of training" if v.wall_s else ""
        lines.append(
            f"{v.label}: {v.run.backend} run at {v.run.path}, {len(v.evals)} evals{wall}; "
            f"final step {v.final_step} {f.solve_rate:.1%}, best step {v.best_step} "
            f"{b.solve_rate:.1%} ({f.n_mazes} mazes x {f.samples} sample{'s' if f.samples != 1 else ''})"
        )
    return "\n".join(lines)
