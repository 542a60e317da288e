"""Training rollouts captured per step: a few sampled groups of each step's rollout batch, kept
under the run dir so a researcher can see what the policy does while it trains, on either
backend (the local trainer writes them; on SkyRL, rlkit's generator does).

    RUN/rollouts/global_step_N.jsonl     one line per episode (`CapturedEpisode`)

An episode is stored as its `Trajectory` (maze spec, each turn's answer, moves, positions and
the policy's probability of each move) without token ids or logprobs, plus its step, group and
advantage. Images are never stored: replays re-render them from the maze and the moves. Files
are written atomically and only the newest `keep` steps stay, as with checkpoints.

    write_step(run_dir, 12, episodes, keep=50)
    capture_steps(run_dir)                  # [.., 12]
    read_step(run_dir, 12)                  # [CapturedEpisode, ...]
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rlkit.episodes.rollout import Trajectory
from rlkit.errors import RlkitError, UsageError
from rlkit.fsio import atomic_write_text

CAPTURE_DIR = "rollouts"
_FILE = re.compile(r"global_step_(\d+)\.jsonl")


@dataclass(frozen=True)
class CapturedEpisode:
    """One training episode as the trainer scored it."""

    step: int
    """The global step whose rollout batch held it."""
    group: int
    """Its group (the maze's index in the step's batch or dataset): GRPO compares within it."""
    advantage: float
    """The advantage the loss gave its tokens (0 for a group the loss dropped)."""
    trajectory: Trajectory

    def to_json(self) -> str:
        head = json.dumps({"step": self.step, "group": self.group, "advantage": self.advantage})
        return head[:-1] + ',"trajectory":' + _slim(self.trajectory).to_json() + "}"

    @classmethod
    def from_dict(cls, d: dict) -> CapturedEpisode:
        return cls(
            int(d["step"]),
            int(d["group"]),
            float(d["advantage"]),
            Trajectory.from_dict(d["trajectory"]),
        )


def _slim(t: Trajectory) -> Trajectory:
    """The trajectory without token ids and logprobs (a replay needs neither; they are most of
    an episode's bytes)."""
    turns = [replace(x, prompt_ids=None, response_ids=None, logprobs=None) for x in t.turns]
    return replace(t, turns=turns)


def capture_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CAPTURE_DIR


def step_path(run_dir: str | Path, step: int) -> Path:
    return capture_dir(run_dir) / f"global_step_{step}.jsonl"


def pick_groups(groups: Sequence[int], n: int, *, seed: int, step: int) -> list[int]:
    """`n` of a step's distinct `groups`, drawn from (seed, step) so a resumed run picks what an
    uninterrupted one would; all of them when there are no more than `n`."""
    if n < 0:
        raise UsageError(f"capture groups ({n}) must be >= 0 (0 turns capture off)")
    distinct = sorted(set(int(g) for g in groups))
    if len(distinct) <= n:
        return distinct
    rng = np.random.default_rng([seed, step, 7])
    return sorted(int(g) for g in rng.choice(distinct, size=n, replace=False))


def write_step(
    run_dir: str | Path, step: int, episodes: Sequence[CapturedEpisode], *, keep: int | None
) -> Path:
    """Write one step's captured episodes (atomically: a reader never sees half a file), then
    delete all but the newest `keep` steps' files (None keeps every step)."""
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
    d = capture_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for p in d.iterdir() if (m := _FILE.fullmatch(p.name)))


def read_step(run_dir: str | Path, step: int) -> list[CapturedEpisode]:
    """One step's captured episodes; a missing step is a UsageError naming the captured ones,
    a damaged line an RlkitError naming the file and line."""
    path = step_path(run_dir, step)
    if not path.is_file():
        have = capture_steps(run_dir)
        raise UsageError(
            f"no captured rollouts for step {step} in {Path(run_dir)}: captured steps are "
            f"{have or 'none (capture is off, or no step has finished yet)'}"
        )
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            out.append(CapturedEpisode.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            raise RlkitError(
                f"{path}:{n} is not a captured episode ({e}): the file is damaged"
            ) from e
    return out
