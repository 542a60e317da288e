"""Named maze sets: the pinned 64-maze test sets and the disjoint training stream.

A test set is a `MazeSpec` plus seeds 0..63; its combined hash (sha256 over the member hashes in
order) is pinned here, and `pinned_set()` refuses to return a set whose hash moved: a changed
generator would silently change every published number. Training maze `i` is a pure function
of (spec, i) drawn from a separate seed stream and skipping any maze that is in the test set, so
a data cursor (an index) is all a checkpoint needs to resume the stream exactly.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from functools import lru_cache

from rlkit.errors import UsageError
from rlkit.maze.core import Maze
from rlkit.maze.generation import check_size, generate

TRAIN_SEED_BASE = 1_000_000
"""Training seeds start here, far from the test seeds (0..63)."""


@dataclass(frozen=True)
class MazeSpec:
    """How to generate a family of mazes."""

    height: int = 3
    width: int = 3
    algorithm: str = "wilson"
    """`wilson` gives uniformly random perfect mazes; `dfs` long corridors."""
    placement: str = "random"
    """`random` start/exit cells (more varied) or `corners`."""
    min_path: int = 2
    """Minimum shortest-path moves between start and exit (1-move mazes test nothing)."""

    def __post_init__(self) -> None:
        check_size(self.height, self.width)
        generate(
            self.height,
            self.width,
            0,
            algorithm=self.algorithm,
            placement=self.placement,
            min_path=self.min_path,
        )  # validates the rest

    def maze(self, seed: int) -> Maze:
        return generate(
            self.height,
            self.width,
            seed,
            algorithm=self.algorithm,
            placement=self.placement,
            min_path=self.min_path,
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TestSetDef:
    spec: MazeSpec
    n: int
    pinned_hash: str
    doc: str


TEST_SETS: dict[str, TestSetDef] = {
    "test": TestSetDef(
        MazeSpec(3, 3, "wilson", "random", 2),
        64,
        "f94993d2e31e5bd8db898d4f17da8bc3a81d01518dd18f62525a6d2515e076cc",
        "The local default: 64 Wilson 3x3-cell mazes, random start/exit >= 2 moves apart, "
        "seeds 0..63. The tiny VLM is trained and judged on this family.",
    ),
    "test-large": TestSetDef(
        MazeSpec(6, 6, "wilson", "random", 6),
        64,
        "624958d5eccf197b951670aaa1d9e3618a421ccb19950dc403795306ded8ca31",
        "The cluster set: 64 Wilson 6x6-cell mazes, random start/exit >= 6 moves apart, seeds "
        "0..63, for Qwen3-VL-8B runs.",
    ),
    "visgym-easy": TestSetDef(
        MazeSpec(9, 9, "visgym", "corners", 1),
        64,
        "77603d3d07ddd54ec92c199cb7b9c377a1d936fc5f58c3e3c5b3248184e37d4a",
        "The seed's task: VisGym's maze_2d/easy (9x9 squares), exactly what reset(seed=i) gives "
        "for i in 0..63 (SkyRL's visgym eval rows); shortest paths 12-16 moves.",
    ),
    "visgym-hard": TestSetDef(
        MazeSpec(11, 11, "visgym", "corners", 1),
        64,
        "f109157ab283c81ab421ec6d9d4b5812f628a491975fee0a483f60a2896d8c77",
        "VisGym's maze_2d/hard (11x11 squares), reset(seed=i) for i in 0..63; shortest paths "
        "16-32 moves.",
    ),
}


def combined_hash(mazes: list[Maze]) -> str:
    h = hashlib.sha256()
    for m in mazes:
        h.update(m.content_hash.encode())
    return h.hexdigest()


def _lookup(name: str) -> TestSetDef:
    if name not in TEST_SETS:
        raise UsageError(f"unknown maze set {name!r}: use one of {', '.join(TEST_SETS)}")
    return TEST_SETS[name]


@lru_cache(maxsize=8)
def _build(name: str) -> tuple[Maze, ...]:
    d = _lookup(name)
    return tuple(d.spec.maze(seed) for seed in range(d.n))


def pinned_set(name: str = "test", *, verify: bool = True) -> list[Maze]:
    """The named test set, checked against its pinned hash."""
    mazes = list(_build(name))
    if verify and combined_hash(mazes) != _lookup(name).pinned_hash:
        raise RuntimeError(
            f"test set {name!r} hash {combined_hash(mazes)[:12]} != pinned "
            f"{_lookup(name).pinned_hash[:12]}: maze generation changed; results are not comparable"
        )
    return mazes


def pinned_set_hash(name: str = "test") -> str:
    return _lookup(name).pinned_hash


def pinned_spec(name: str = "test") -> MazeSpec:
    return _lookup(name).spec


@lru_cache(maxsize=8)
def _excluded(spec: MazeSpec) -> frozenset[str]:
    return frozenset(
        m.content_hash for name, d in TEST_SETS.items() if d.spec == spec for m in _build(name)
    )


def train_maze(spec: MazeSpec, index: int) -> Maze:
    """Training maze number `index` of `spec`'s stream, never one of a test set's mazes."""
    if index < 0:
        raise UsageError(f"training maze index must be >= 0, got {index}")
    excluded = _excluded(spec)
    seed = TRAIN_SEED_BASE + index
    maze = spec.maze(seed)
    attempt = 0
    while maze.content_hash in excluded:  # small grids repeat; re-draw from a salted seed
        attempt += 1
        seed = TRAIN_SEED_BASE + index + attempt * 1_000_003_000
        maze = spec.maze(seed)
    return maze


def train_mazes(spec: MazeSpec, start: int, n: int) -> list[Maze]:
    return [train_maze(spec, i) for i in range(start, start + n)]
