"""Named maze sets: the pinned 64-maze test sets (`pinned_set` refuses a moved hash) and the
disjoint training stream, a pure function of (spec, i): docs/mazes.md#sets-and-the-training-stream."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import replace
from functools import lru_cache

from rlkit.errors import UsageError
from rlkit.maze.core import Maze, exit_distances, shortest_path
from rlkit.maze.families import SETS, MazeSet, MazeSpec, maze_set

TRAIN_SEED_BASE = 1_000_000
"""Training seeds start here, far from the test seeds (0..63)."""

TEST_SETS: dict[str, MazeSet] = SETS
"""The pinned test sets: the registry itself (`rlkit.maze.families.SETS`), not a copy."""


def combined_hash(mazes: list[Maze]) -> str:
    """sha256 over the members' content hashes, in order (what a set pins)."""
    return hashlib.sha256("".join(m.content_hash for m in mazes).encode()).hexdigest()


@lru_cache(maxsize=8)
def _build(name: str) -> tuple[Maze, ...]:
    d = maze_set(name)
    return tuple(d.spec.maze(seed) for seed in range(d.n))


def pinned_set(name: str = "test") -> list[Maze]:
    """The named test set, checked against its pinned hash."""
    mazes = list(_build(name))
    pinned = maze_set(name).pinned_hash
    if not pinned:
        raise RuntimeError(
            f"test set {name!r} has no pinned hash yet: run `python scripts/set_hash.py {name}` "
            "and pin what it prints in rlkit/maze/families.py"
        )
    if combined_hash(mazes) != pinned:
        raise RuntimeError(
            f"test set {name!r} hash {combined_hash(mazes)[:12]} != pinned "
            f"{pinned[:12]}: maze generation changed; results are not comparable"
        )
    return mazes


def computed_set_hash(name: str) -> str:
    """The combined hash of set `name` as generated now (what to pin for a new set)."""
    return combined_hash(list(_build(name)))


def pinned_set_hash(name: str = "test") -> str:
    return maze_set(name).pinned_hash


def pinned_spec(name: str = "test") -> MazeSpec:
    return maze_set(name).spec


@lru_cache(maxsize=8)
def _excluded(spec: MazeSpec) -> frozenset[str]:
    return frozenset(
        m.content_hash for name, d in TEST_SETS.items() if d.spec == spec for m in _build(name)
    )


def train_maze(spec: MazeSpec, index: int) -> Maze:
    """Training maze number `index` of `spec`'s stream, never one of a test set's mazes."""
    if index < 0:
        raise UsageError(f"training maze index must be >= 0, got {index}")
    # small grids repeat a test maze: re-draw, salted
    draws = (spec.maze(TRAIN_SEED_BASE + index + a * 1_000_003_000) for a in itertools.count())
    return next(m for m in draws if m.content_hash not in _excluded(spec))


def train_mazes(spec: MazeSpec, start: int, n: int, share: float = 1.0) -> list[Maze]:
    """Training mazes `start` .. `start + n - 1`, each played from `nearer_start(maze, share)`."""
    return [nearer_start(train_maze(spec, i), share) for i in range(start, start + n)]


HARD_SEARCH = 1000
"""Most stream mazes a slot passes over before giving up."""


def turns_to_solve(maze: Maze) -> int:
    """Turns the shortest way takes: its moves, plus the squares game's closing `stop`."""
    return int(exit_distances(maze)[maze.start]) + (maze.game == "squares")


def draw_train_mazes(
    spec: MazeSpec,
    cursor: int,
    n: int,
    share: float = 1.0,
    *,
    max_turns: int | None = None,
    hard: float = 0.0,
    min_path: int = 0,
) -> tuple[list[Maze], int]:
    """`n` training mazes from stream index `cursor` on, and the cursor after them; skipped:
    mazes longer than `max_turns`, and in a `hard` share of slots those shorter than `min_path`."""
    mazes = []
    for k in range(n):
        need = min_path if math.floor((k + 1) * hard) > math.floor(k * hard) else 0
        maze, cursor, passed = train_maze(spec, cursor), cursor + 1, 0
        while (max_turns is not None and turns_to_solve(maze) > max_turns) or (
            need and turns_to_solve(maze) - (maze.game == "squares") < need
        ):
            passed += 1
            if passed > HARD_SEARCH:
                want = f"a shortest path of {need} moves or more" if need else "a shortest way"
                raise UsageError(
                    f"none of {HARD_SEARCH} training mazes has {want} that fits {max_turns} "
                    "turns: raise task.env.max_turns, lower grpo.hard_min_path, or set "
                    "grpo.solvable_only=false"
                )
            maze, cursor = train_maze(spec, cursor), cursor + 1
        mazes.append(nearer_start(maze, share))
    return mazes, cursor


def curriculum_share(step: int, steps: int | None, start: float) -> float:
    """Share of each training maze's shortest path played at GRPO step `step` (from 0): `start`
    growing linearly to 1 at step `steps`, 1 from then on and always when `steps` is None."""
    if steps is None or step >= steps:
        return 1.0
    return start + (1.0 - start) * step / steps


def nearer_start(maze: Maze, share: float) -> Maze:
    """`maze` started ceil(share * L) moves (>= 1) from the exit along its L-move shortest path;
    `maze` itself at share 1 or when the moved maze would be a test set's."""
    path = shortest_path(maze)
    keep = max(1, math.ceil(share * (len(path) - 1) - 1e-9))
    if keep >= len(path) - 1:
        return maze
    moved = replace(maze, start=path[-1 - keep], meta={})
    shape = (maze.height, maze.width)
    tests = (
        _excluded(d.spec) for d in TEST_SETS.values() if (d.spec.height, d.spec.width) == shape
    )
    return maze if any(moved.content_hash in hashes for hashes in tests) else moved
