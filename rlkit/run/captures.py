"""Training rollouts captured per step on either backend: a few groups a step, one `CapturedEpisode`
a line in RUN/rollouts/global_step_N.jsonl, newest `keep` kept: docs/reading-runs.md#what-capture-costs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from rlkit.episodes.rollout import Trajectory, stored_turn
from rlkit.errors import RlkitError, UsageError
from rlkit.fsio import atomic_write_text

_FILE = re.compile(r"global_step_(\d+)\.jsonl")


@dataclass(frozen=True)
class CapturedEpisode:
    """One training episode as the trainer scored it."""

    step: int
    group: int
    """Its group (the maze's index in the step's batch): GRPO compares within it."""
    advantage: float
    """The episode-level advantage (0 for a group the loss dropped; gigpo adds each turn's)."""
    trajectory: Trajectory
    turn_advantages: tuple[float, ...] | None = None
    """Under gigpo the advantage the loss gave each turn (0 where dropped); None otherwise."""

    def to_dict(self) -> dict:
        """As stored: no token ids or logprobs (most of the bytes; a replay needs neither)."""
        head = {"step": self.step, "group": self.group, "advantage": self.advantage}
        if self.turn_advantages is not None:
            head["turn_advantages"] = list(self.turn_advantages)
        turns = [stored_turn(t, _NOT_STORED) for t in self.trajectory.turns]
        return {**head, "trajectory": {**vars(self.trajectory), "turns": turns}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> CapturedEpisode:
        per_turn = d.get("turn_advantages")
        return cls(
            int(d["step"]),
            int(d["group"]),
            float(d["advantage"]),
            Trajectory.from_dict(d["trajectory"]),
            None if per_turn is None else tuple(float(a) for a in per_turn),
        )


_NOT_STORED = frozenset({"prompt_ids", "response_ids", "logprobs"})


def training_label(step: int) -> str:
    """A captured episode's `policy`: the step whose weights played it (not the run's name)."""
    return f"train@{step}"


def capture_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "rollouts"


def step_path(run_dir: str | Path, step: int) -> Path:
    return capture_dir(run_dir) / f"global_step_{step}.jsonl"


def pick_groups(groups: Sequence[int], n: int, *, seed: int, step: int) -> list[int]:
    """`n` of a step's distinct `groups` drawn from (seed, step), as a resumed run draws them."""
    if n < 0:
        raise UsageError(f"capture groups ({n}) must be >= 0 (0 turns capture off)")
    distinct = sorted(set(int(g) for g in groups))
    if len(distinct) <= n:
        return distinct
    rng = np.random.default_rng([seed, step, 7])
    return sorted(int(g) for g in rng.choice(distinct, size=n, replace=False))


def pick_episodes(
    step: int,
    trajectories: Sequence[Trajectory],
    groups: Sequence[int],
    advantages: Sequence[float],
    *,
    n: int,
    seed: int,
    turn_advantages: Sequence[float] | None = None,
) -> list[CapturedEpisode]:
    """Every episode of `n` of a step's groups (`pick_groups`), in batch order; the three lists
    hold one entry an episode, gigpo's `turn_advantages` one a turn (episode then turn order)."""
    if not len(trajectories) == len(groups) == len(advantages):
        raise UsageError(
            f"{len(trajectories)} trajectories, {len(groups)} groups and {len(advantages)} "
            "advantages: give one of each per episode"
        )
    per_turn = _by_episode(trajectories, turn_advantages)
    picked = set(pick_groups(groups, n, seed=seed, step=step))
    return [
        CapturedEpisode(int(step), int(g), float(a), t, p)
        for t, g, a, p in zip(trajectories, groups, advantages, per_turn, strict=True)
        if int(g) in picked
    ]


def _by_episode(
    trajectories: Sequence[Trajectory], turn_values: Sequence[float] | None
) -> list[tuple[float, ...] | None]:
    """Per-turn values (episode then turn order) cut into one tuple an episode (None: none)."""
    if turn_values is None:
        return [None] * len(trajectories)
    if (turns := sum(len(t.turns) for t in trajectories)) != len(turn_values):
        raise UsageError(f"{len(turn_values)} turn advantages for {turns} turns: give one a turn")
    values = iter(turn_values)
    return [tuple(float(v) for v in islice(values, len(t.turns))) for t in trajectories]


def write_step(
    run_dir: str | Path, step: int, episodes: Sequence[CapturedEpisode], *, keep: int | None
) -> Path:
    """Write one step's captured episodes atomically, then keep the newest `keep` (None: all)."""
    if keep is not None and keep < 1:
        raise UsageError(f"keep ({keep}) must be >= 1 captured steps, or None to keep all")
    path = step_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(e.to_json() + "\n" for e in episodes))
    if keep is not None:
        for old in capture_steps(run_dir)[:-keep]:
            step_path(run_dir, old).unlink(missing_ok=True)
    return path


def capture_steps(run_dir: str | Path) -> list[int]:
    """The steps with captured rollouts, oldest first."""
    files = capture_dir(run_dir).glob("global_step_*.jsonl")
    return sorted(int(m.group(1)) for p in files if (m := _FILE.fullmatch(p.name)))


def drop_after(run_dir: str | Path, step: int) -> list[int]:
    """Delete the captured steps after `step` (a resume trains them again) and half-written
    files; returns the steps deleted."""
    gone = [s for s in capture_steps(run_dir) if s > step]
    for s in gone:
        step_path(run_dir, s).unlink(missing_ok=True)
    for tmp in capture_dir(run_dir).glob(".global_step_*.jsonl.tmp-*"):
        tmp.unlink(missing_ok=True)
    return gone


def not_captured(step: int, run_dir: str | Path, have: Sequence[int]) -> UsageError:
    """The one-line error for a step without captured rollouts, naming the captured ones."""
    return UsageError(
        f"no captured rollouts for step {step} in {Path(run_dir)}: captured steps are "
        f"{list(have) or 'none (capture is off, or no step has finished yet)'}"
    )


def read_step(run_dir: str | Path, step: int) -> list[CapturedEpisode]:
    """One step's captured episodes (a missing step: UsageError; a damaged line: RlkitError)."""
    path = step_path(run_dir, step)
    if not path.is_file():
        raise not_captured(step, run_dir, capture_steps(run_dir))
    out = []
    # "\n" only: str.splitlines() would also split at U+0085/U+2028 inside a model's answer
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line:
            continue
        try:
            out.append(CapturedEpisode.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            raise RlkitError(
                f"{path}:{n} is not a captured episode ({e}): the file is damaged"
            ) from e
    return out


@dataclass(frozen=True)
class StepSummary:
    """One captured step in numbers (`rlkit rollouts RUN` lists them)."""

    step: int
    episodes: int
    groups: int
    solve_rate: float
    mean_advantage: float
    turns_mean: float

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """`step 12: 16 episodes of 2 groups, 44% solved, mean advantage -0.12, 9.5 turns`."""
        return (
            f"step {self.step}: {self.episodes} episodes of {self.groups} groups, "
            f"{100 * self.solve_rate:.0f}% solved, mean advantage {self.mean_advantage:+.2f}, "
            f"{self.turns_mean:.1f} turns"
        )


def summarize(episodes: Sequence[CapturedEpisode], step: int | None = None) -> StepSummary:
    """The numbers of one step's captured episodes (`step` for a step that captured none)."""
    if not episodes:
        if step is None:
            raise UsageError("no captured episodes to summarise: give the step they belong to")
        return StepSummary(step, 0, 0, 0.0, 0.0, 0.0)
    n = len(episodes)
    return StepSummary(
        episodes[0].step if step is None else step,
        n,
        len({e.group for e in episodes}),
        sum(e.trajectory.solved for e in episodes) / n,
        round(sum(e.advantage for e in episodes) / n, 6) + 0.0,  # +0.0: never "-0.00"
        sum(len(e.trajectory.turns) for e in episodes) / n,
    )
