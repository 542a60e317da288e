"""What a local run carries between steps, so that a resumed run equals an uninterrupted one:
`TrainState`, what is `due` after a step, and every random draw's seed (`seed_for`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlkit.errors import UsageError
from rlkit.train.config import ScheduleConfig

ROLLOUT, SHUFFLE = 1, 2
"""Stream tags: the key part after the run's seed, so that no two streams share a key."""


def seed_for(*parts: int) -> int:
    """A 64-bit seed from non-negative ints, the key's length part of it ((s, t) != (s, t, 0))."""
    if any(int(p) < 0 for p in parts):
        raise UsageError(f"seed key {parts} must be non-negative ints (SeedSequence entropy)")
    key = [*map(int, parts), len(parts)]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0])


def rollout_seed(seed: int, step: int, round_: int = 0) -> int:
    """Seed of global step `step`'s episodes in dynamic-sampling round `round_`."""
    return seed_for(seed, ROLLOUT, step) if round_ == 0 else seed_for(seed, ROLLOUT, step, round_)


def shuffle_seed(seed: int, step: int, epoch: int) -> int:
    """Seed of the minibatch order of epoch `epoch` at global step `step`."""
    return seed_for(seed, SHUFFLE, step, epoch)


@dataclass
class TrainState:
    """Everything besides weights and optimizer that a resume needs (saved in trainer_state.pt)."""

    step: int = 0
    phase: str = "warm_start"
    grpo_steps: int = 0
    warm_start_end: int | None = None
    cursor: int = 0
    """Index of the next training maze in the stream: no maze replayed or skipped on resume."""
    val_solve_rate: float | None = None
    """The warm start's latest validation solve rate (None: none yet); it picks the BC phase."""
    elapsed_s: float = 0.0
    """Training wall time up to this state (s), summed over resumed segments."""


@dataclass(frozen=True)
class Due:
    """What follows a step: an eval of the pinned test set, a checkpoint."""

    eval: bool
    checkpoint: bool


def due(s: TrainState, sched: ScheduleConfig) -> Due:
    """Both at the warm-start boundary and the last GRPO step; else an eval every `eval_every`
    GRPO steps and a checkpoint every `ckpt_every` global steps."""
    boundary = s.warm_start_end == s.step
    last = s.grpo_steps >= sched.steps and s.phase == "grpo"
    grpo_tick = s.phase == "grpo" and not boundary and s.grpo_steps > 0
    return Due(
        eval=boundary or last or (grpo_tick and s.grpo_steps % sched.eval_every == 0),
        checkpoint=boundary or last or s.step % sched.ckpt_every == 0,
    )
