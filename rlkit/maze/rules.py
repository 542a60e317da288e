"""The maze game's rules as pure functions on a frozen state (Gymnasium's functional style).

`initial(maze) -> State`, `transition(state, actions) -> State`, `reward(state)`,
`terminal(state)` (reached the exit) and `truncated(state, max_turns)` (ran out of turns) are
shared by the skyrl-gym env, the scripted policies, the renderer and the failure analysis, so
all of them agree on what happened in an episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rlkit.maze.core import Action, Cell, Maze


@dataclass(frozen=True)
class State:
    """Where the agent is and what it has done so far in one episode."""

    maze: Maze
    pos: Cell
    trail: tuple[Cell, ...]
    """Every cell occupied so far, in order, starting with the start cell (repeats kept)."""
    turns: int = 0
    """Turns used; a turn is one model answer, whatever it contained."""
    moves: int = 0
    """Moves attempted (a turn may carry several when the env allows it)."""
    bumps: int = 0
    """Moves into a wall; the agent stays where it was."""
    revisits: int = 0
    """Moves that entered a cell visited before."""
    parse_errors: int = 0
    """Turns whose answer held no valid move."""
    last_action: Action | None = None

    @property
    def visited(self) -> frozenset[Cell]:
        return frozenset(self.trail)


def initial(maze: Maze) -> State:
    return State(maze=maze, pos=maze.start, trail=(maze.start,))


def step_cell(cell: Cell, action: Action) -> Cell:
    dr, dc = action.delta
    return (cell[0] + dr, cell[1] + dc)


def transition(state: State, actions: Sequence[Action]) -> State:
    """Play one turn: apply `actions` in order (stopping at the exit); none means a parse error."""
    if terminal(state):
        return state
    pos, trail = state.pos, list(state.trail)
    seen = set(trail)
    bumps = revisits = moves = 0
    last = state.last_action
    for action in actions:
        moves += 1
        last = action
        if not state.maze.can_move(pos, action):
            bumps += 1
            continue
        pos = step_cell(pos, action)
        revisits += pos in seen
        seen.add(pos)
        trail.append(pos)
        if pos == state.maze.exit:
            break
    return replace(
        state,
        pos=pos,
        trail=tuple(trail),
        turns=state.turns + 1,
        moves=state.moves + moves,
        bumps=state.bumps + bumps,
        revisits=state.revisits + revisits,
        parse_errors=state.parse_errors + (not actions),
        last_action=last,
    )


def terminal(state: State) -> bool:
    """The agent stands on the exit (Gymnasium's `terminated`)."""
    return state.pos == state.maze.exit


def truncated(state: State, max_turns: int) -> bool:
    """The turn budget is spent without reaching the exit (Gymnasium's `truncated`)."""
    return not terminal(state) and state.turns >= max_turns


def reward(state: State) -> float:
    """1.0 only on reaching the exit: a sparse task reward (format rewards made models game the format)."""
    return 1.0 if terminal(state) else 0.0
