"""Why an episode failed, judged against the BFS oracle (pure): the first kind in `KINDS` order
that fits, judged on the replayed state so SkyRL's dumps classify alike: docs/mazes.md#failure-kinds."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from rlkit.episodes.rollout import Trajectory, replay_states
from rlkit.maze.core import Maze, open_degree, shortest_path

KINDS = ("format_error", "loop", "wall_bump", "wrong_branch", "timeout")
"""The cell game's kinds (rlkit's own mazes), in the order they are checked."""
SQUARE_KINDS = ("format_error", "stopped_off_target", "never_stopped", *KINDS[1:])
"""VisGym's squares game: the cell kinds plus the two ways `stop` goes wrong."""


def kinds_for(maze: Maze | dict) -> tuple[str, ...]:
    """The failure kinds of `maze`'s game (a Maze or a spec dict as trajectories hold it)."""
    squares = maze.game == "squares" if isinstance(maze, Maze) else bool(maze.get("squares"))
    return SQUARE_KINDS if squares else KINDS


def left_optimal_path_at_junction(traj: Trajectory) -> bool:
    """True if the agent stepped off the start->exit path at a 3+-way cell and ended off it."""
    states = replay_states(traj)
    maze = states[0].maze
    path = set(shortest_path(maze))
    if states[-1].pos in path:
        return False
    return any(
        a.pos in path and b.pos not in path and open_degree(maze, a.pos) >= 3
        for a, b in pairwise(states)
    )


def classify(traj: Trajectory) -> str | None:
    """The primary failure kind of an episode, or None if it was solved."""
    if traj.solved:
        return None
    turns = len(traj.turns) or 1
    if sum(t.parse_error is not None for t in traj.turns) * 2 >= turns:
        return "format_error"
    final = replay_states(traj)[-1]
    if final.maze.game == "squares":
        if final.stopped:
            return "stopped_off_target"
        if final.maze.exit in final.trail:
            return "never_stopped"
    if max(Counter(final.trail).values()) >= 3:
        return "loop"
    if final.moves and final.bumps * 2 >= final.moves:
        return "wall_bump"
    if left_optimal_path_at_junction(traj):
        return "wrong_branch"
    return "timeout"


def failure_counts(trajs: list[Trajectory]) -> dict[str, int]:
    """Counts by kind, every kind of the episodes' game present (zeros included)."""
    kinds = kinds_for(trajs[0].maze) if trajs else KINDS
    counts = dict.fromkeys(kinds, 0)
    for kind in filter(None, map(classify, trajs)):
        counts[kind] = counts.get(kind, 0) + 1
    return counts
