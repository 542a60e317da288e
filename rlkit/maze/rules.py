"""The maze games' rules as pure functions on a frozen state (`initial`, `transition`, `reward`,
`terminal`, `solved`, `truncated`), shared by everything that plays an episode. `solved` is what
both backends count; the reward never decides: docs/mazes.md#the-rules-and-what-counts-as-solved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rlkit.maze.core import STOP, Action, Cell, Maze, Move, Stop, optimal_action


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
    stopped: bool = False
    """The agent said `stop` (squares game): the episode is over wherever it stands."""

    @property
    def visited(self) -> frozenset[Cell]:
        return frozenset(self.trail)


def initial(maze: Maze) -> State:
    return State(maze=maze, pos=maze.start, trail=(maze.start,))


def transition(state: State, actions: Sequence[Move]) -> State:
    """Play one turn: apply `actions` in order (stopping at the exit, or at `stop`); none
    means a parse error. `stop` counts as a turn's answer but not as a move."""
    if terminal(state):
        return state
    pos, trail = state.pos, list(state.trail)
    seen = set(trail)
    bumps = revisits = moves = 0
    last = state.last_action
    stopped = False
    cells = state.maze.game == "cells"
    for action in actions:
        if isinstance(action, Stop):
            stopped = not cells  # the cell game has no stop (its parsers never give one)
            break
        moves += 1
        last = action
        if not state.maze.can_move(pos, action):
            bumps += 1
            continue
        pos = action.step(pos)
        revisits += pos in seen
        seen.add(pos)
        trail.append(pos)
        if cells and pos == state.maze.exit:
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
        stopped=stopped,
    )


def terminal(state: State) -> bool:
    """Gymnasium's `terminated`: on the exit (cells) or said `stop` anywhere (squares)."""
    if state.maze.game == "squares":
        return state.stopped
    return state.pos == state.maze.exit


def solved(state: State) -> bool:
    """Success: on the exit (cells); stopped on the target (squares)."""
    return terminal(state) and state.pos == state.maze.exit


def record_solved(won: bool | None, reward: float) -> bool:
    """A record's kept verdict (`solved`), else (older files) its reward, 1 exactly when solved."""
    if won is not None:
        return bool(won)
    return reward > 0


def truncated(state: State, max_turns: int) -> bool:
    """The turn budget is spent without the game ending (Gymnasium's `truncated`)."""
    return not terminal(state) and state.turns >= max_turns


def reward(state: State) -> float:
    """1.0 only when `solved`: a sparse task reward (format rewards made models game the format)."""
    return 1.0 if solved(state) else 0.0


def best_move(state: State) -> Move:
    """The oracle's answer: a shortest path's next move; `stop` on the target (squares)."""
    if state.maze.game == "squares" and state.pos == state.maze.exit:
        return STOP
    best = optimal_action(state.maze, state.pos)
    return Action.UP if best is None else best


def game_moves(maze: Maze) -> tuple[Move, ...]:
    """What an answer may ask for in `maze`'s game: four moves, plus `stop` for squares."""
    return (*Action, STOP) if maze.game == "squares" else tuple(Action)
