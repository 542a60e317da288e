"""The workbench's report: the solve-rate table, GRPO's paired by-maze test, rlkit's protocol
beside the seed's (docs/statistics.md), the headline and summary.json.

    print(report.solve_rate_table({**baselines, **report.milestones(evals, boundary)}))
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rlkit.episodes.evaluate import EvalResult, compare
from rlkit.errors import UsageError
from rlkit.stats import CI_METHODS, EXACT_CI_METHOD, PairedByMaze

BASE = "base"
"""Name of the untrained model's baseline."""


def milestones(evals: Mapping[int, EvalResult], boundary: int | None) -> dict[str, EvalResult]:
    """The first eval, the warm-start boundary and the last checkpoint, as table rows."""
    if not evals:
        raise UsageError("no checkpoint evals yet: train first (notebook 03)")
    steps = sorted(evals)
    rows = {f"step {steps[0]} (start)": evals[steps[0]]}
    if boundary is not None and boundary in evals and boundary not in (steps[0], steps[-1]):
        rows[f"step {boundary} (warm start done)"] = evals[boundary]
    rows[f"step {steps[-1]} (final)"] = evals[steps[-1]]
    return rows


@dataclass(frozen=True)
class PairedTest:
    """Two checkpoints compared maze by maze."""

    step_a: int
    step_b: int
    test: PairedByMaze

    @property
    def verdict(self) -> str:
        return self.test.verdict(f"step {self.step_a}", f"step {self.step_b}")

    def __str__(self) -> str:
        t = self.test
        return (
            f"step {self.step_a} -> step {self.step_b}: {t.rate_a:.1%} -> {t.rate_b:.1%} on "
            f"{t.n_mazes} mazes x {t.samples} samples/maze, paired by maze; {self.verdict}"
        )


def grpo_paired_test(evals: Mapping[int, EvalResult], boundary: int | None) -> PairedTest:
    """GRPO's first checkpoint (the warm-start boundary, else the first eval) vs the last, by maze."""
    steps = sorted(evals)
    if len(steps) < 2:
        raise UsageError(f"a paired test needs two evaluated checkpoints, found {len(steps)}")
    first = boundary if boundary in evals and boundary != steps[-1] else steps[0]
    return PairedTest(first, steps[-1], compare(evals[first], evals[steps[-1]]))


def solve_rate_table(rows: Mapping[str, EvalResult]) -> str:
    """Plain-text table: solve rate, 95% CI, pass@k and episodes, then the interval methods."""
    if not rows:
        raise UsageError("solve_rate_table needs at least one eval result")
    width = max(len("policy"), *(len(n) for n in rows))
    lines = [f"{'policy':<{width}}   solve  95% CI             pass@k   episodes"]
    for name, r in rows.items():
        lo, hi = r.ci95
        best_k = max(r.pass_at_k, key=lambda k: int(k.split("@")[1]), default=None)
        pak = f"{r.pass_at_k[best_k]:.0%} @{best_k.split('@')[1]}" if best_k else "-"
        lines.append(
            f"{name:<{width}}  {r.solve_rate:6.1%}  [{lo:5.1%}, {hi:6.1%}]  {pak:<7}  "
            f"{r.n_mazes}x{r.samples}"
        )
    for method in sorted({r.ci_method for r in rows.values()}):
        lines.append(f"95% CI {method}: {CI_METHODS.get(method, 'unknown method')}")
    exact = [  # one sample a maze: the seed's protocol reports an exact interval instead
        f"{name} [{r.exact_ci95[0]:.1%}, {r.exact_ci95[1]:.1%}]"
        for name, r in rows.items()
        if r.exact_ci95 is not None
    ]
    if exact:
        lines.append(
            "one sample a maze: the seed's protocol reports the exact interval "
            f"({EXACT_CI_METHOD}) instead: {'; '.join(exact)}"
        )
    return "\n".join(lines)


def _row(r: EvalResult) -> dict:
    return {
        "policy": r.policy,
        "step": r.step,
        "solve_rate": round(r.solve_rate, 4),
        "ci95": [round(x, 4) for x in r.ci95],
        "ci_method": r.ci_method,
        "n_mazes": r.n_mazes,
        "samples": r.samples,
        "mode": r.mode,
        "protocol": r.protocol,
        "headline": r.headline,
        "failures": r.failures,
    }


def seed_protocol(
    evals: Mapping[int, EvalResult], greedy: EvalResult | None = None
) -> EvalResult | None:
    """`greedy`, else the last eval, if measured by the seed's protocol; else None."""
    if greedy is not None and greedy.protocol == "seed":
        return greedy
    final = evals[max(evals)] if evals else None
    return final if final is not None and final.protocol == "seed" else None


def protocol_lines(evals: Mapping[int, EvalResult], greedy: EvalResult | None = None) -> list[str]:
    """Two lines: the last checkpoint under rlkit's protocol and under the seed's."""
    if not evals:
        raise UsageError("no checkpoint evals yet: train first (notebook 03)")
    final, seed = evals[max(evals)], seed_protocol(evals, greedy)
    ours = "not measured (this run's evals were greedy, one sample a maze)"
    if final.protocol != "seed":
        ours = final.summary()
    how = "rlkit eval --protocol seed --policy <its export>"
    theirs = seed.summary() if seed is not None else f"not measured for this run ({how})"
    return [f"rlkit's protocol: {ours}", f"the seed's protocol: {theirs}"]


def _protocol_row(r: EvalResult) -> dict:
    return {**_row(r), "summary": r.summary()}


def build_summary(
    baselines: Mapping[str, EvalResult],
    evals: Mapping[int, EvalResult],
    *,
    boundary: int | None,
    paired: PairedTest | None,
    run: str,
    plots: list[str],
    greedy: EvalResult | None = None,
) -> dict:
    """The demo's summary.json: baseline and final solve rate with CI, the paired by-maze test,
    and with `greedy` (`final_greedy_eval`) the greedy solve rate."""
    if not evals:
        raise UsageError("no checkpoint evals to summarise: train first (notebook 03)")
    final, seed = evals[max(evals)], seed_protocol(evals, greedy)
    base = baselines.get(BASE) or evals[min(evals)]
    table = {**baselines, **milestones(evals, boundary)}
    if greedy is not None:
        table[f"step {greedy.step} greedy (k=1)"] = greedy
    return {
        "run": run,
        "headline": headline(base, evals, boundary, paired, greedy),
        "test_set_hash": final.test_set_hash,
        "baseline": _row(base),
        "final": _row(final),
        "final_greedy": None if greedy is None else _row(greedy),
        "protocols": {
            "rlkit": None if final.protocol == "seed" else _protocol_row(final),
            "seed": None if seed is None else _protocol_row(seed),
        },
        "warm_start_end": boundary,
        "paired_test": None
        if paired is None
        else {
            "steps": [paired.step_a, paired.step_b],
            "verdict": paired.verdict,
            **asdict(paired.test),
        },
        "baselines": {k: _row(v) for k, v in baselines.items()},
        "checkpoints": {str(s): _row(r) for s, r in sorted(evals.items())},
        "table": solve_rate_table(table).splitlines(),
        "plots": plots,
    }


def _rate(r: EvalResult) -> str:
    return f"{r.solve_rate:.1%} [{r.ci95[0]:.1%}, {r.ci95[1]:.1%}]"


def headline(
    base: EvalResult,
    evals: Mapping[int, EvalResult],
    boundary: int | None,
    paired: PairedTest | None,
    greedy: EvalResult | None = None,
) -> str:
    """One line: base -> warm start -> final (and greedy) with intervals, then the verdict."""
    final_step = max(evals)
    parts = [f"base {_rate(base)}"]
    if boundary in evals and boundary != final_step:
        parts.append(f"warm start {_rate(evals[boundary])} (step {boundary})")
    final = f"final {_rate(evals[final_step])} (step {final_step})"
    parts.append(final + (f", greedy {_rate(greedy)}" if greedy is not None else ""))
    line = " -> ".join(parts) + f"; 95% CI {evals[final_step].ci_method}"
    return line + (f"; paired by maze: {paired.verdict}" if paired is not None else "")


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    path = Path(out_dir) / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path
