"""One captured GRPO group worked by hand (notebook 03): `(r_i - mean(r)) / (std(r) + 1e-6)` in
numpy, and the rule that reproduces the advantages the loss used.

    print(groups.worked_group(run).table())
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.errors import RlkitError, UsageError
from rlkit.run import Run
from rlkit.run.captures import CapturedEpisode

EPS = 1e-6
"""Added to the group's std before dividing, as both backends do."""
TOLERANCE = 1e-3
"""Captured advantages are float32 on the way to the file: agreement to this is a match."""


@dataclass(frozen=True)
class WorkedGroup:
    """A group's rewards, the captured advantages and the rule they follow."""

    step: int
    group: int
    rewards: tuple[float, ...]
    captured: tuple[float, ...]
    """The advantages the loss gave each episode."""
    rule: str
    """The `RULES` text of the formula that reproduces `captured`."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.rewards))

    @property
    def std(self) -> float:
        """Bessel's (unbiased) std, as torch.std and SkyRL compute it."""
        return float(np.std(self.rewards, ddof=1))

    def by_hand(self) -> tuple[float, ...]:
        """Plain GRPO's advantages for these rewards."""
        return tuple((r - self.mean) / (self.std + EPS) for r in self.rewards)

    def table(self) -> str:
        """One line per episode, then the statistics and the rule."""
        lines = [
            f"training step {self.step}, group {self.group} (one maze, {len(self.rewards)} "
            "episodes of the same policy)",
            "episode  reward  (r - mean) / (std + 1e-6)  advantage used",
        ]
        rows = enumerate(zip(self.rewards, self.by_hand(), self.captured, strict=True))
        lines += [f"{i:>7}  {r:>6.2f}  {h:>+25.3f}  {a:>+14.3f}" for i, (r, h, a) in rows]
        lines += [f"group mean {self.mean:.3f}, std {self.std:.3f} (Bessel)", f"rule: {self.rule}"]
        return "\n".join(lines)


RULES = {
    "grpo": "plain GRPO: (r - mean) / (std + 1e-6); above-average episodes are pushed up",
    "mean": "Dr. GRPO (grpo_norm_by_std=false): r - mean, no division by the std",
    "dropped": "every episode scored alike, so no episode beat another: advantage 0 "
    "(the zero-variance filter drops the group from the loss)",
    "fail": "every episode failed: the fail advantage (recipe.fail_advantage) makes all of "
    "their moves less likely",
    "other": "none of the rules here reproduces the captured advantages: the run's recipe "
    "changes them (see its run.json)",
}


def match_rule(rewards: Sequence[float], captured: Sequence[float]) -> str:
    """The name in `RULES` of the formula that turns `rewards` into `captured`."""
    r, a = np.asarray(rewards, float), np.asarray(captured, float)
    if len(r) < 2:
        raise UsageError(f"a group of {len(r)} episode: GRPO compares at least two")
    alike = np.ptp(r) == 0
    if alike and np.allclose(a, 0.0, atol=TOLERANCE):
        return "dropped"
    if alike and np.all(r <= 0) and np.ptp(a) < TOLERANCE and a[0] < 0:
        return "fail"
    centred = r - r.mean()
    if not alike and np.allclose(a, centred / (r.std(ddof=1) + EPS), atol=TOLERANCE):
        return "grpo"
    if np.allclose(a, centred, atol=TOLERANCE):
        return "dropped" if alike else "mean"
    return "other"


def by_group(episodes: Sequence[CapturedEpisode]) -> dict[int, list[CapturedEpisode]]:
    """{group: its episodes by sample}, groups ascending."""
    ordered = sorted(episodes, key=lambda e: (e.group, e.trajectory.sample))
    return {g: list(eps) for g, eps in groupby(ordered, key=lambda e: e.group)}


def worked_group(run: Run, step: int | None = None, group: int | None = None) -> WorkedGroup:
    """A captured group worked by hand: by default the first mixed group of the newest readable
    step that has one (else of the newest)."""
    steps = run.capture_steps()
    if not steps:
        raise UsageError(
            f"{run.name} captured no training rollouts (schedule.capture_groups is 0, or no "
            "GRPO step has finished yet)"
        )
    if step is not None or group is not None:
        return from_episodes(run.captures(steps[-1] if step is None else step), group)
    newest = None
    for s in reversed(steps):
        try:
            episodes = run.captures(s)
        except RlkitError:
            continue
        if mixed_groups(episodes):
            return from_episodes(episodes)
        newest = episodes if newest is None else newest
    return from_episodes(newest if newest is not None else run.captures(steps[-1]))


def mixed_groups(episodes: Sequence[CapturedEpisode]) -> list[int]:
    """The groups, ascending, whose episodes did not all get one reward."""
    return [
        g for g, eps in by_group(episodes).items() if len({e.trajectory.reward for e in eps}) > 1
    ]


def from_episodes(episodes: Sequence[CapturedEpisode], group: int | None = None) -> WorkedGroup:
    """`worked_group` on one step's captured episodes."""
    groups = by_group(episodes)
    if not groups:
        raise UsageError("the step captured no episodes: pick another step")
    if group is None:
        group = (mixed_groups(episodes) or list(groups))[0]
    if group not in groups:
        raise UsageError(f"the step captured groups {list(groups)}, not {group}")
    eps = groups[group]
    rewards = tuple(float(e.trajectory.reward) for e in eps)
    captured = tuple(float(e.advantage) for e in eps)
    return WorkedGroup(eps[0].step, group, rewards, captured, RULES[match_rule(rewards, captured)])


def worked_text(run_dir: str | Path, *, cluster: Any = None) -> str:
    """Notebook 03's worked group of the run at `run_dir`, or a line saying why there is none."""
    from rlkit.notebook.workbench import open_source

    try:
        return worked_group(open_source(run_dir, cluster=cluster)).table()
    except RlkitError as e:
        return f"no captured group to work through yet: {e}"
