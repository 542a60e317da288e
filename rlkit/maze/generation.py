"""Maze generation from an explicit seed or `np.random.Generator`, dispatched by name through
`GENERATORS` (`wilson`, `dfs`, `visgym`: VisGym's maze_2d replayed draw for draw, without
gymnasium): docs/mazes.md#generators."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlkit.errors import UsageError
from rlkit.maze.core import (
    ALL_WALLS,
    MAX_SIZE,
    MIN_SIZE,
    OPPOSITE,
    Cell,
    Maze,
    distances_from,
    neighbours,
)

PLACEMENTS = ("corners", "random")


def _is_int(n: object) -> bool:
    return isinstance(n, int | np.integer) and not isinstance(n, bool)


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if not _is_int(seed) or seed < 0:
        raise UsageError(
            f"seed must be a non-negative integer or np.random.Generator, got {seed!r}"
        )
    return np.random.default_rng(int(seed))


def _carve(walls: np.ndarray, a: Cell, b: Cell) -> None:
    bit = next(bit for bit, nb in neighbours(a, *walls.shape) if nb == b)
    walls[a] &= ~bit & 0xF
    walls[b] &= ~OPPOSITE[bit] & 0xF


def _wilson(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform spanning tree by loop-erased random walks (Wilson 1996)."""
    walls = np.full((h, w), ALL_WALLS, dtype=np.uint8)
    in_tree = np.zeros((h, w), dtype=bool)
    in_tree[int(rng.integers(h)), int(rng.integers(w))] = True
    order = [(r, c) for r in range(h) for c in range(w)]
    for idx in rng.permutation(len(order)):
        start = order[idx]
        if in_tree[start]:
            continue
        nxt: dict[Cell, Cell] = {}
        cell = start
        while not in_tree[cell]:  # random walk; overwriting nxt erases loops
            nbs = [nb for _, nb in neighbours(cell, h, w)]
            nxt[cell] = nbs[int(rng.integers(len(nbs)))]
            cell = nxt[cell]
        cell = start
        while not in_tree[cell]:
            in_tree[cell] = True
            _carve(walls, cell, nxt[cell])
            cell = nxt[cell]
    return walls


def _dfs(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Recursive backtracker (iterative): long corridors, few junctions."""
    walls = np.full((h, w), ALL_WALLS, dtype=np.uint8)
    seen = np.zeros((h, w), dtype=bool)
    stack = [(int(rng.integers(h)), int(rng.integers(w)))]
    seen[stack[0]] = True
    while stack:
        cell = stack[-1]
        nbs = [nb for _, nb in neighbours(cell, h, w) if not seen[nb]]
        if not nbs:
            stack.pop()
            continue
        nb = nbs[int(rng.integers(len(nbs)))]
        _carve(walls, cell, nb)
        seen[nb] = True
        stack.append(nb)
    return walls


_DIRECTIONS = ((0, 1), (1, 0), (0, -1), (-1, 0))
"""VisGym's walk directions 0..3, in its order (a different order, a different maze)."""


def wilson_grid(height: int, width: int, seed: int) -> np.ndarray:
    """VisGym's inner grid (1 = floor): a spanning tree over the even cells, in VisGym's order."""
    h, w = 2 * (height // 2) + 1, 2 * (width // 2) + 1
    rng = random.Random(seed)
    grid = np.zeros((h, w), dtype=np.uint8)
    unvisited: list[Cell] = [(r, c) for r in range(0, h, 2) for c in range(0, w, 2)]
    in_tree: set[Cell] = set()

    def inside(cell: Cell, d: int) -> bool:
        r, c = cell[0] + 2 * _DIRECTIONS[d][0], cell[1] + 2 * _DIRECTIONS[d][1]
        return 0 <= r < h and 0 <= c < w

    first = unvisited.pop(rng.randint(0, len(unvisited) - 1))
    in_tree.add(first)
    grid[first] = 1
    while unvisited:
        start = unvisited[rng.randint(0, len(unvisited) - 1)]
        path: dict[Cell, int] = {}
        cell = start
        while cell not in in_tree:
            d = rng.randint(0, 3)
            while not inside(cell, d):
                d = rng.randint(0, 3)
            path[cell] = d  # overwriting a revisited cell's direction erases the loop
            cell = (cell[0] + 2 * _DIRECTIONS[d][0], cell[1] + 2 * _DIRECTIONS[d][1])
        cell = start
        while cell not in in_tree:
            in_tree.add(cell)
            unvisited.remove(cell)
            grid[cell] = 1
            dr, dc = _DIRECTIONS[path[cell]]
            grid[cell[0] + dr, cell[1] + dc] = 1
            cell = (cell[0] + 2 * dr, cell[1] + 2 * dc)
    return grid


def generate_visgym(size: int, seed: int | np.random.Generator) -> Maze:
    """The maze VisGym's `Maze2DEnv` of side `size` gives on `reset(seed)` (a Generator: its
    `np_random`)."""
    if not _is_int(size) or size % 2 == 0:
        raise UsageError(f"VisGym maze size must be an odd integer (9 easy, 11 hard), got {size!r}")
    if not 5 <= size <= 15:
        raise UsageError(f"VisGym maze size ({size}) must be in [5, 15]: rlkit grids hold 16")
    rng = _rng(seed)
    int_seed = None if isinstance(seed, np.random.Generator) else int(seed)
    inner = wilson_grid(size - 2, size - 2, int(rng.integers(2**32)))
    squares = np.ones((size, size), dtype=bool)
    squares[1:-1, 1:-1] = inner == 0
    lo, hi = 1, size - 2  # VisGym's four agent corners in its order; the target is opposite
    agent = [(lo, lo), (hi, hi), (hi, lo), (lo, hi)][int(rng.integers(0, 4))]
    target = (lo + hi - agent[0], lo + hi - agent[1])
    return Maze(None, agent, target, int_seed, "visgym", squares=squares)


@dataclass(frozen=True)
class Generator:
    """One maze algorithm: which game it makes and the function that makes it."""

    game: str
    """`cells` (walls between cells; `generate` places the ends) or `squares` (`fn` places them)."""
    fn: Callable
    """cells: `fn(height, width, rng) -> uint8 walls`; squares: `fn(size, seed) -> Maze`."""
    doc: str


GENERATORS: dict[str, Generator] = {
    "wilson": Generator("cells", _wilson, "uniform spanning tree: many short dead ends"),
    "dfs": Generator("cells", _dfs, "recursive backtracker: long corridors, few junctions"),
    "visgym": Generator(
        "squares", generate_visgym, "VisGym's maze_2d: agent and target in opposite corners"
    ),
}
"""Every maze algorithm by name (`generate`, `--algorithm`, `MazeSpec`; docs/extending.md)."""

ALGORITHMS = tuple(n for n, g in GENERATORS.items() if g.game == "cells")
"""The cell game's generators (what a widget or `rlkit maze --algorithm` offers)."""


def generate(
    height: int,
    width: int,
    seed: int | np.random.Generator = 0,
    *,
    algorithm: str = "wilson",
    placement: str = "corners",
    min_path: int = 1,
) -> Maze:
    """A perfect maze; `placement` `corners` (top-left to bottom-right) or `random` (two cells
    at least `min_path` moves apart)."""
    for name, n in (("height", height), ("width", width)):
        if not _is_int(n) or not MIN_SIZE <= n <= MAX_SIZE:
            raise UsageError(
                f"maze {name} must be an integer in [{MIN_SIZE}, {MAX_SIZE}], got {n!r}"
            )
    if algorithm not in GENERATORS:
        raise UsageError(
            f"unknown maze algorithm {algorithm!r}: use one of {', '.join(GENERATORS)}"
        )
    gen = GENERATORS[algorithm]
    if gen.game == "squares":
        if height != width or placement != "corners":
            raise UsageError(
                f"{algorithm} mazes are square with their own corner placement: got "
                f"{height}x{width}, placement {placement!r}; use height == width and "
                "placement='corners'"
            )
        return gen.fn(height, seed)
    if placement not in PLACEMENTS:
        raise UsageError(f"unknown placement {placement!r}: use one of {', '.join(PLACEMENTS)}")
    if not 1 <= min_path <= height * width - 1:
        raise UsageError(
            f"min_path ({min_path}) must be in [1, {height * width - 1}] for a {height}x{width} maze"
        )
    int_seed = None if isinstance(seed, np.random.Generator) else seed
    rng = _rng(seed)
    walls = gen.fn(height, width, rng)
    if placement == "corners":
        return Maze(walls, (0, 0), (height - 1, width - 1), int_seed, algorithm)
    for _ in range(10_000):
        a, b = rng.choice(height * width, size=2, replace=False)
        start, exit_ = divmod(int(a), width), divmod(int(b), width)
        if distances_from(walls, exit_)[start] >= min_path:
            return Maze(walls, start, exit_, int_seed, algorithm)
    raise UsageError(f"could not place endpoints {min_path} moves apart: lower min_path")
