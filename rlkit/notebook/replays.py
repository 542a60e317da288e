"""What notebook 05 replays of a run: one maze at the last evaluated checkpoint, the same maze
at GRPO's first beside it, and the last checkpoint's failures by kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.notebook.player import disagreement
from rlkit.notebook.report import grpo_paired_test
from rlkit.notebook.workbench import (
    checkpoint_evals,
    diff_maze,
    episode,
    eval_trajectories,
    failure_examples,
)
from rlkit.run import Run, open_run


@dataclass(frozen=True)
class RunReplays:
    """Maze `maze` at the last evaluated step and, with two evals, at GRPO's first."""

    run: str
    maze: int
    last: EvalResult
    last_trajs: list[Trajectory] = field(repr=False)
    first: EvalResult | None = None
    """None when the run has one eval: nothing to compare with."""
    first_trajs: list[Trajectory] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        return f"step {self.last.step}"

    @property
    def labels(self) -> tuple[str, str]:
        """The diff's two panes: GRPO's first step, then the last."""
        first = self.first.step if self.first is not None else None
        return f"step {first}", self.label

    @property
    def episode(self) -> Trajectory:
        """Sample 0 of `maze` at the last step."""
        return episode(self.last_trajs, self.last, self.maze)

    @property
    def pair(self) -> tuple[Trajectory, Trajectory] | None:
        """Sample 0 of `maze` at GRPO's first step and at the last; None with one eval."""
        if self.first is None:
            return None
        return episode(self.first_trajs, self.first, self.maze), self.episode

    @property
    def disagreement(self) -> str | None:
        """Where the two checkpoints first chose differently (`player.disagreement`); None
        with one eval."""
        pair = self.pair
        return None if pair is None else disagreement(*pair, self.labels)

    def failures(self) -> dict[str, Trajectory]:
        """The last step's first failed episode of each kind, in the taxonomy's order."""
        return failure_examples(self.last_trajs)

    def __str__(self) -> str:
        than = f", against step {self.first.step}" if self.first is not None else ""
        return f"{self.run}: maze {self.maze} at step {self.last.step}{than}"


def for_run(source: str | Path | Run, *, maze: int | None = None) -> RunReplays:
    """The replays of a run; `maze` None: one where GRPO's first and last checkpoints differ
    (`diff_maze`)."""
    run = open_run(source)
    evals = checkpoint_evals(run)
    if not evals:
        raise UsageError(f"{run.name} has no evaluated checkpoint yet: train first (notebook 03)")
    if len(evals) == 1:
        ((step, last),) = evals.items()
        return RunReplays(run.name, maze or 0, last, eval_trajectories(run, step))
    paired = grpo_paired_test(evals, run.warm_start_end())
    first, last = evals[paired.step_a], evals[paired.step_b]
    return RunReplays(
        run.name,
        diff_maze(first, last) if maze is None else maze,
        last,
        eval_trajectories(run, paired.step_b),
        first,
        eval_trajectories(run, paired.step_a),
    )
