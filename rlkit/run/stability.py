"""The stability signals of a GRPO run, named once for both backends (`SIGNALS`), and the
collapse warnings the monitor and `rlkit train` print (docs/reading-runs.md; the thresholds:
docs/decisions.md#stability-thresholds). Torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ZERO_VARIANCE_SHARE = "rollout/zero_variance_share"

SIGNALS: dict[str, tuple[str, ...]] = {
    "entropy": ("loss/entropy",),
    "clip fraction": ("loss/clip_fraction",),
    "zero-variance groups (share)": (ZERO_VARIANCE_SHARE,),
    "rollout-trainer logprob gap": (
        "loss/rollout_train_logprobs_abs_diff_mean",
        "loss/rollout_train_logprobs_abs_diff_max",
    ),
    "turns": ("rollout/turns_mean",),
    "response tokens": ("rollout/avg_assistant_tokens", "rollout/avg_num_tokens"),
    "grad norm": ("loss/grad_norm",),
}
"""Signal -> the metric names that carry it on both backends (the first is the headline)."""

ENTROPY_COLLAPSE_FRACTION = 0.2
"""Judge the entropy once below this fraction of the first GRPO step's."""

CONVERGED_SOLVE = 0.9
"""A fallen entropy is convergence at this rollout solve rate or more, else a collapse."""

RECENT_STEPS = 5

SOLVE = ("rollout/solve_rate", "rollout/reward_mean")
"""The rollout's success on either backend (the reward stands in without the rate)."""

LOGPROB_GAP_LIMIT = 0.1
"""Warn past this mean per-token |rollout - trainer| logprob gap (nats)."""

PHASE_KEYS = ("train/phase", "phase")


def finite_number(value: object) -> float | None:
    """A logged value as a float; None for a missing, non-numeric, boolean or non-finite one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def zero_variance_share(record: Mapping[str, Any]) -> float | None:
    """The share of a step's groups with zero reward variance: the count over `rollout/groups`,
    else over the count plus `train/groups`."""
    zero = finite_number(record.get("rollout/zero_variance_groups"))
    if zero is None:
        return None
    total = finite_number(record.get("rollout/groups"))
    if total is None:
        kept = finite_number(record.get("train/groups"))
        total = None if kept is None else zero + kept
    return zero / total if total else None


def with_derived(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record plus the signals derived from it (the zero-variance share)."""
    share = zero_variance_share(record)
    return dict(record) if share is None else {**record, ZERO_VARIANCE_SHARE: share}


def resolve(records: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Signal -> the metric names these records carry for it (signals with none are left out)."""
    keys = {k for r in records for k in with_derived(r)}
    found = {name: [k for k in names if k in keys] for name, names in SIGNALS.items()}
    return {name: ks for name, ks in found.items() if ks}


def _first(record: Mapping[str, Any], names: Sequence[str]) -> float | None:
    return next((v for k in names if (v := finite_number(record.get(k))) is not None), None)


def merge_steps(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per step, ascending, a step's records merged in file order (a later value
    wins: an eval's record, a step logged again after a resume); no int step: dropped."""
    merged: dict[int, dict[str, Any]] = {}
    for r in records:
        step = r.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            merged.setdefault(step, {}).update(r)
    return [merged[s] for s in sorted(merged)]


def _is_grpo(record: Mapping[str, Any]) -> bool:
    phase = next((record[k] for k in PHASE_KEYS if isinstance(record.get(k), str)), None)
    return phase is None or "grpo" in phase.lower()


def _grpo_steps(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in merge_steps(records) if _is_grpo(r)]


def _mean_solve(records: Sequence[Mapping[str, Any]]) -> float | None:
    solves = [v for r in records if (v := _first(r, SOLVE)) is not None]
    return sum(solves) / len(solves) if solves else None


def grpo_series(
    records: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> list[tuple[int, float]]:
    """(step, value) of the GRPO steps that log one of `names` (the first a step has)."""
    grpo = _grpo_steps(records)
    return [(r["step"], v) for r in grpo if (v := _first(r, names)) is not None]


def grpo_entropies(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """(step, entropy) of the GRPO steps, ascending."""
    return grpo_series(records, SIGNALS["entropy"])


@dataclass(frozen=True)
class EntropyFall:
    """Entropy below `ENTROPY_COLLAPSE_FRACTION` of GRPO's start, and what it means."""

    kind: str
    """"collapse" (rewards stuck: a warning) or "convergence"."""
    step: int
    entropy: float
    first_step: int
    first: float
    solve: float | None

    def line(self) -> str:
        fall = (
            f"{self.entropy:.3g} at step {self.step} is {self.entropy / self.first:.0%} of "
            f"{self.first:.3g} at step {self.first_step}"
        )
        if self.kind == "convergence":
            return (
                f"entropy converging: {fall}, as groups all succeed (rollout solve rate "
                f"{self.solve:.0%} over the last {RECENT_STEPS} steps)"
            )
        why = (
            "no rollout solve rate logged to tell it from convergence"
            if self.solve is None
            else f"rewards stuck: rollout solve rate {self.solve:.0%} over the last "
            f"{RECENT_STEPS} steps, under the {CONVERGED_SOLVE:.0%} of convergence"
        )
        return (
            f"entropy collapsing: {fall} (judged below {ENTROPY_COLLAPSE_FRACTION:.0%}) with "
            f"{why}: groups fail alike and stop teaching"
        )


def entropy_fall(records: Sequence[Mapping[str, Any]]) -> EntropyFall | None:
    """None while the latest GRPO entropy is at least `ENTROPY_COLLAPSE_FRACTION` of the first;
    else a collapse or convergence by the last `RECENT_STEPS` steps' rollout solve rate."""
    entropies = grpo_entropies(records)
    if len(entropies) < 2:
        return None
    (step0, first), (step, last) = entropies[0], entropies[-1]
    if not (first > 0 and last < ENTROPY_COLLAPSE_FRACTION * first):
        return None
    grpo = [r for r in _grpo_steps(records) if r["step"] <= step and _first(r, SOLVE) is not None]
    solve = _mean_solve(grpo[-RECENT_STEPS:])
    kind = "convergence" if solve is not None and solve >= CONVERGED_SOLVE else "collapse"
    return EntropyFall(kind, step, last, step0, first, solve)


def no_gradient(records: Sequence[Mapping[str, Any]]) -> str | None:
    """A warning when every group was zero-variance in each of the last `RECENT_STEPS` GRPO
    steps that logged the counts, at a rollout solve rate under `CONVERGED_SOLVE`; else None."""
    grpo = [with_derived(r) for r in _grpo_steps(records)]
    counted = [r for r in grpo if finite_number(r.get(ZERO_VARIANCE_SHARE)) is not None]
    recent = counted[-RECENT_STEPS:]
    if len(recent) < RECENT_STEPS or any(r[ZERO_VARIANCE_SHARE] < 1.0 for r in recent):
        return None
    solve = _mean_solve(recent)
    if solve is not None and solve >= CONVERGED_SOLVE:
        return None
    entropies = [(s, e) for s, e in grpo_entropies(records) if s <= recent[-1]["step"]]
    last = (
        f"entropy last logged {entropies[-1][1]:.3g} at step {entropies[-1][0]}"
        if entropies
        else "no entropy logged"
    )
    rate = "no rollout solve rate logged" if solve is None else f"rollout solve rate {solve:.0%}"
    return (
        f"no gradient: every group zero-variance in each of the last {RECENT_STEPS} GRPO steps "
        f"(steps {recent[0]['step']}-{recent[-1]['step']}) with {rate}, under the "
        f"{CONVERGED_SOLVE:.0%} of convergence: the episodes no longer differ, so nothing "
        f"trains ({last}): a collapsed policy, or a task beyond it"
    )


def stability_warnings(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One-line warnings on a run's metric records: entropy collapsed (`entropy_fall`), no
    gradient (`no_gradient`), the logprob gap past `LOGPROB_GAP_LIMIT`; [] on a healthy run."""
    warnings = []
    fall = entropy_fall(records)
    if fall is not None and fall.kind == "collapse":
        warnings.append(fall.line())
    if (stalled := no_gradient(records)) is not None:
        warnings.append(stalled)
    gaps = grpo_series(records, SIGNALS["rollout-trainer logprob gap"][:1])  # the mean
    if gaps and gaps[-1][1] > LOGPROB_GAP_LIMIT:
        step, gap = gaps[-1]
        warnings.append(
            f"rollout-trainer logprob gap {gap:.3g} at step {step} is past {LOGPROB_GAP_LIMIT} "
            "nats/token: the sampler and the trainer disagree (check TIS, weight sync, dtype)"
        )
    return warnings


def stability_notes(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is worth a line but no warning: entropy that fell as the groups all succeed."""
    fall = entropy_fall(records)
    return [fall.line()] if fall is not None and fall.kind == "convergence" else []


def warning_line(records: Sequence[Mapping[str, Any]]) -> str:
    """The warnings as one line ('' when none), for the monitor's progress."""
    return "; ".join(stability_warnings(records))
