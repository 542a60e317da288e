"""VisGym's maze_2d generator replayed draw for draw with numpy and the standard library only (no
gymnasium); the steps: docs/mazes.md#generators."""

from __future__ import annotations

import random

import numpy as np

from rlkit.errors import UsageError
from rlkit.maze.core import Cell, Maze

ALGORITHM = "visgym"

_DIRECTIONS = ((0, 1), (1, 0), (0, -1), (-1, 0))
"""The walk's direction numbers 0..3, in VisGym's order (a different order, a different maze)."""


def wilson_grid(height: int, width: int, seed: int) -> np.ndarray:
    """The inner grid, 1 = floor: a uniform spanning tree over the cells at even (row, col),
    drawn in VisGym's order (docs/mazes.md#generators)."""
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


def corner_pairs(size: int) -> list[tuple[Cell, Cell]]:
    """VisGym's four (agent, target) choices, in its order: opposite corners of the floor."""
    lo, hi = 1, size - 2
    return [((lo, lo), (hi, hi)), ((hi, hi), (lo, lo)), ((hi, lo), (lo, hi)), ((lo, hi), (hi, lo))]


def generate_visgym(size: int, seed: int | np.random.Generator) -> Maze:
    """The maze VisGym's `Maze2DEnv(maze_width=size, maze_height=size)` gives on `reset(seed)`;
    a Generator stands in for its `np_random` (training streams pass their own)."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size % 2 == 0:
        raise UsageError(f"VisGym maze size must be an odd integer (9 easy, 11 hard), got {size!r}")
    if not 5 <= size <= 15:
        raise UsageError(f"VisGym maze size ({size}) must be in [5, 15]: rlkit grids hold 16")
    if isinstance(seed, np.random.Generator):
        rng, int_seed = seed, None
    elif isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise UsageError(
            f"seed must be a non-negative integer or np.random.Generator, got {seed!r}"
        )
    else:
        rng, int_seed = np.random.default_rng(int(seed)), int(seed)
    inner = wilson_grid(size - 2, size - 2, int(rng.integers(2**32)))
    squares = np.ones((size, size), dtype=bool)
    squares[1:-1, 1:-1] = inner == 0
    agent, target = corner_pairs(size)[int(rng.integers(0, 4))]
    return Maze(None, agent, target, int_seed, ALGORITHM, squares=squares)
