"""Mazes: the frozen maze value, moves, BFS solving, difficulty and hashing (pure functions). One
4-bit wall mask per cell (N=1, E=2, S=4, W=8) holds both games, `cells` and VisGym's `squares`,
so BFS and the oracle run unchanged on both: docs/mazes.md#the-maze-value-and-its-two-games."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from functools import cached_property

import numpy as np

from rlkit.errors import UsageError

MIN_SIZE, MAX_SIZE = 2, 16

Cell = tuple[int, int]


class Action(IntEnum):
    """The four moves. The value order is the order of action words everywhere (prompts, logits)."""

    UP = 0
    DOWN = 1
    LEFT = 2
    RIGHT = 3

    @property
    def word(self) -> str:
        return self.name.lower()

    @property
    def delta(self) -> Cell:
        return _DELTAS[self]

    @property
    def wall_bit(self) -> int:
        return _WALL_BITS[self]

    def step(self, cell: Cell) -> Cell:
        """The cell one move from `cell` in this direction (walls not checked)."""
        return (cell[0] + _DELTAS[self][0], cell[1] + _DELTAS[self][1])


class Stop(Enum):
    """VisGym's fifth action, squares only (not in `Action`: four moves are a contract)."""

    STOP = "stop"

    @property
    def word(self) -> str:
        return self.value


STOP = Stop.STOP
Move = Action | Stop
"""What one answer can ask for: a move, or (squares game) `stop`."""
GAMES = ("cells", "squares")


def move_from_word(word: str) -> Move:
    """`up`/`down`/`left`/`right`/`stop` -> the move (replays read trajectories' words back)."""
    if word == STOP.word:
        return STOP
    try:
        return Action[word.upper()]
    except KeyError:
        raise UsageError(f"unknown move word {word!r}: use up, down, left, right or stop") from None


N, E, S, W = 1, 2, 4, 8
ALL_WALLS = N | E | S | W
_DELTAS = {Action.UP: (-1, 0), Action.DOWN: (1, 0), Action.LEFT: (0, -1), Action.RIGHT: (0, 1)}
_WALL_BITS = {Action.UP: N, Action.DOWN: S, Action.LEFT: W, Action.RIGHT: E}
OPPOSITE = {N: S, S: N, E: W, W: E}


@dataclass(frozen=True, eq=False)
class Maze:
    """A maze: read-only (h, w) uint8 wall masks, start, exit (+ provenance); equal by content."""

    walls: np.ndarray | None
    start: Cell
    exit: Cell
    seed: int | None = None
    algorithm: str | None = None
    meta: dict = field(default_factory=dict, compare=False)
    squares: np.ndarray | None = None
    """The `squares` game's (h, w) bool map (True = wall; `walls` derived, pass None)."""

    def __post_init__(self) -> None:
        if self.squares is not None:
            sq = np.array(self.squares, dtype=bool)
            if sq.ndim != 2:
                raise UsageError(f"maze squares must be a 2-D map, got shape {sq.shape}")
            sq.setflags(write=False)
            object.__setattr__(self, "squares", sq)
            object.__setattr__(self, "walls", walls_from_squares(sq))
        walls = np.array(self.walls, dtype=np.uint8)
        if walls.ndim != 2 or not all(MIN_SIZE <= n <= MAX_SIZE for n in walls.shape):
            raise UsageError(
                f"maze walls must be a 2-D grid with sides in [{MIN_SIZE}, {MAX_SIZE}], got "
                f"shape {walls.shape}: pass one wall mask per cell"
            )
        gap = open_border(walls)
        if gap is not None:
            cell, side = gap
            raise UsageError(
                f"maze cell {cell} has no outer wall on its {side.word} side, so the agent could "
                f"leave the grid: set wall bit {side.wall_bit} there or regenerate the maze"
            )
        walls.setflags(write=False)
        object.__setattr__(self, "walls", walls)
        object.__setattr__(self, "start", _cell(self.start, walls.shape, "start"))
        object.__setattr__(self, "exit", _cell(self.exit, walls.shape, "exit"))
        if self.start == self.exit:
            raise UsageError(f"maze start and exit are the same cell {self.start}: move the exit")
        if self.squares is not None:
            for name, cell in (("start", self.start), ("exit", self.exit)):
                if self.squares[cell]:
                    raise UsageError(f"maze {name} {cell} is a wall square: put it on the floor")

    @property
    def game(self) -> str:
        """`squares` (VisGym's: wall squares, `stop` on the target) or `cells` (walls between)."""
        return "cells" if self.squares is None else "squares"

    @property
    def height(self) -> int:
        return int(self.walls.shape[0])

    @property
    def width(self) -> int:
        return int(self.walls.shape[1])

    def can_move(self, cell: Cell, action: Action) -> bool:
        return not self.walls[cell] & action.wall_bit

    @cached_property
    def content_hash(self) -> str:
        """sha256 over the canonical bytes: shape, walls, start, exit (not seed/algorithm)."""
        h = hashlib.sha256()
        h.update(np.array([self.height, self.width, *self.start, *self.exit], "<u2").tobytes())
        h.update(self.walls.tobytes())
        if self.squares is not None:  # cell mazes hash as before: their pinned sets stay put
            h.update(b"squares")
            h.update(self.squares.tobytes())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Maze) and self.content_hash == other.content_hash

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def to_dict(self) -> dict:
        """JSON-safe spec; walls as one hex digit per cell, rows joined by '/'."""
        rows = ["".join(f"{int(v):x}" for v in row) for row in self.walls]
        extra = {} if self.squares is None else {"squares": squares_text(self.squares)}
        return {
            "height": self.height,
            "width": self.width,
            "walls": "/".join(rows),
            "start": list(self.start),
            "exit": list(self.exit),
            "seed": self.seed,
            "algorithm": self.algorithm,
            "hash": self.content_hash,
            **extra,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict | str) -> Maze:
        """Inverse of `to_dict` (also accepts its JSON string); checks the hash when present."""
        try:
            if isinstance(d, str):
                d = json.loads(d)
            if d.get("squares"):
                squares, walls = squares_from_text(d["squares"]), None
            else:
                rows = d["walls"].split("/")
                walls = np.array([[int(ch, 16) for ch in row] for row in rows], dtype=np.uint8)
                squares = None
            maze = cls(
                walls,
                tuple(d["start"]),
                tuple(d["exit"]),
                d.get("seed"),
                d.get("algorithm"),
                squares=squares,
            )
        except UsageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UsageError(
                f"not a maze spec ({type(e).__name__}: {e}): expected keys walls/start/exit as "
                "written by Maze.to_dict()"
            ) from None
        if d.get("hash") and d["hash"] != maze.content_hash:
            raise UsageError(
                "maze spec hash does not match its walls/start/exit: the spec was edited or corrupted"
            )
        return maze


def walls_from_squares(squares: np.ndarray) -> np.ndarray:
    """Wall masks for a square map: wall squares closed, floor walled towards walls and edges."""
    blocked = np.pad(np.asarray(squares, dtype=bool), 1, constant_values=True)
    walls = np.zeros(np.shape(squares), dtype=np.uint8)
    walls |= np.where(blocked[:-2, 1:-1], N, 0).astype(np.uint8)
    walls |= np.where(blocked[2:, 1:-1], S, 0).astype(np.uint8)
    walls |= np.where(blocked[1:-1, :-2], W, 0).astype(np.uint8)
    walls |= np.where(blocked[1:-1, 2:], E, 0).astype(np.uint8)
    walls[blocked[1:-1, 1:-1]] = ALL_WALLS
    return walls


def squares_text(squares: np.ndarray) -> str:
    """A square map as text: `#` wall, `.` floor, rows joined by '/' (specs, parquet rows)."""
    return "/".join("".join("#" if v else "." for v in row) for row in squares)


def squares_from_text(text: str) -> np.ndarray:
    rows = text.split("/")
    if len({len(r) for r in rows}) != 1 or set("".join(rows)) - {"#", "."}:
        raise ValueError("squares must be equal rows of '#' and '.' joined by '/'")
    return np.array([[ch == "#" for ch in row] for row in rows], dtype=bool)


def open_border(walls: np.ndarray) -> tuple[Cell, Action] | None:
    """The first (row-major) edge cell with no outward wall, and that side; None when closed."""
    grid = set(np.ndindex(walls.shape))
    gaps = [
        (cell, action)
        for cell in grid
        for action in Action
        if action.step(cell) not in grid and not walls[cell] & action.wall_bit
    ]
    return min(gaps, default=None)


def _cell(value, shape: tuple[int, int], name: str) -> Cell:
    try:
        r, c = (int(v) for v in value)
    except (TypeError, ValueError):
        raise UsageError(f"maze {name} must be a (row, col) pair, got {value!r}") from None
    if not (0 <= r < shape[0] and 0 <= c < shape[1]):
        raise UsageError(f"maze {name} {(r, c)} is outside the {shape[0]}x{shape[1]} grid")
    return (r, c)


def neighbours(cell: Cell, h: int, w: int):
    """(wall bit, neighbour cell) for each side of `cell` that faces another cell of the grid."""
    for action in Action:
        r, c = action.step(cell)
        if 0 <= r < h and 0 <= c < w:
            yield action.wall_bit, (r, c)


def distances_from(walls: np.ndarray, target: Cell) -> np.ndarray:
    """BFS distance (in moves) from every cell to `target`; -1 where unreachable."""
    h, w = walls.shape
    dist = np.full((h, w), -1, dtype=np.int32)
    dist[target] = 0
    queue = deque([target])
    while queue:
        cell = queue.popleft()
        for bit, nb in neighbours(cell, h, w):
            if not walls[cell] & bit and dist[nb] < 0:
                dist[nb] = dist[cell] + 1
                queue.append(nb)
    return dist


def exit_distances(maze: Maze) -> np.ndarray:
    """Distance-to-exit map, cached per maze."""
    cached = maze.meta.get("_exit_dist")
    if cached is None:
        cached = distances_from(maze.walls, maze.exit)
        cached.setflags(write=False)
        maze.meta["_exit_dist"] = cached
    return cached


def optimal_action(maze: Maze, cell: Cell) -> Action | None:
    """The BFS-optimal move from `cell` (the first in `Action` order), or None at the exit."""
    dist = exit_distances(maze)
    for action in Action:
        if maze.can_move(cell, action) and dist[action.step(cell)] == dist[cell] - 1:
            return action
    return None


def shortest_path(maze: Maze, start: Cell | None = None) -> list[Cell]:
    """Cells from `start` (default: the maze start) to the exit, both included."""
    cell = maze.start if start is None else start
    path = [cell]
    while cell != maze.exit:
        a = optimal_action(maze, cell)
        if a is None:
            raise UsageError(f"cell {cell} cannot reach the exit: the maze is not connected")
        cell = a.step(cell)
        path.append(cell)
    return path


def open_degree(maze: Maze, cell: Cell) -> int:
    return sum(maze.can_move(cell, a) for a in Action)


@dataclass(frozen=True)
class Difficulty:
    """How hard a maze is for a step-by-step agent."""

    path_length: int
    """Moves on the shortest path from start to exit."""
    turns: int
    """Changes of direction along the shortest path."""
    junctions: int
    """Cells on the path (exit excluded) with 3+ open sides: places to take a wrong branch."""
    dead_ends: int
    """Cells in the whole maze with exactly one open side."""


def difficulty(maze: Maze) -> Difficulty:
    path = shortest_path(maze)
    moves = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(path, path[1:], strict=False)]
    turns = sum(m1 != m2 for m1, m2 in zip(moves, moves[1:], strict=False))
    junctions = sum(open_degree(maze, c) >= 3 for c in path[:-1])
    dead = sum(open_degree(maze, cell) == 1 for cell in np.ndindex(maze.walls.shape))
    return Difficulty(len(path) - 1, turns, junctions, dead)
