"""Maze families: the one registry of named maze sets (`SETS`), each with its generator spec, size,
pinned hash and task; an unknown name is a one-line error. Adding a set: docs/extending.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rlkit.errors import UsageError
from rlkit.maze.core import Maze
from rlkit.maze.generation import generate
from rlkit.maze.render import RenderStyle


@dataclass(frozen=True)
class MazeSpec:
    """How to generate a family of mazes."""

    height: int = 3
    width: int = 3
    algorithm: str = "wilson"
    """A `rlkit.maze.generation.GENERATORS` name: `wilson`, `dfs` (long corridors), `visgym`."""
    placement: str = "random"
    """`random` start/exit cells (more varied) or `corners`."""
    min_path: int = 2
    """Minimum shortest-path moves between start and exit (1-move mazes test nothing)."""

    def __post_init__(self) -> None:
        self.maze(0)  # validates every field

    def maze(self, seed: int) -> Maze:
        return generate(seed=seed, **asdict(self))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MazeSet:
    """One named set: which mazes, the hash that pins them, and the task they are played under."""

    spec: MazeSpec
    n: int
    """Members: the mazes of seeds 0..n-1."""
    pinned_hash: str
    """sha256 over the members' hashes (`scripts/set_hash.py NAME`); "" refused until pinned."""
    doc: str
    max_turns: int = 12
    """Turn budget: part of the set's difficulty (an episode that runs out is truncated)."""
    env: Mapping[str, Any] = field(default_factory=dict)
    """The set's other `rlkit.env.maze_env.EnvConfig` fields (unnamed ones keep defaults)."""


VISGYM_STYLE = RenderStyle(
    view="full",
    cell_px=25,
    wall=(169, 169, 169),
    exit=(255, 0, 0),
    agent=(0, 0, 255),
    show_trail=False,
)
"""VisGym's maze_2d picture: 25 px squares, gray walls, red target, blue agent disc."""

_VISGYM_ENV = {"parser": "visgym", "prompt_style": "visgym", "style": VISGYM_STYLE}

SETS: dict[str, MazeSet] = {
    "test": MazeSet(
        MazeSpec(3, 3, "wilson", "random", 2),
        64,
        "f94993d2e31e5bd8db898d4f17da8bc3a81d01518dd18f62525a6d2515e076cc",
        "The local default: 64 Wilson 3x3-cell mazes, random start/exit >= 2 moves apart, "
        "seeds 0..63. The tiny VLM is trained and judged on this family.",
        max_turns=12,  # and EnvConfig's defaults: the tiny model's ego view, compact prompt
    ),
    "test-large": MazeSet(
        MazeSpec(6, 6, "wilson", "random", 6),
        64,
        "624958d5eccf197b951670aaa1d9e3618a421ccb19950dc403795306ded8ca31",
        "The cluster set: 64 Wilson 6x6-cell mazes, random start/exit >= 6 moves apart, seeds "
        "0..63, for Qwen3-VL-8B runs.",
        max_turns=24,
        # 64 px a cell: 2 x 2 merged image tokens each (docs/mazes.md#each-sets-picture-and-prompt)
        env={"prompt_style": "full", "style": RenderStyle(view="full", cell_px=64, wall_px=4)},
    ),
    "visgym-easy": MazeSet(
        MazeSpec(9, 9, "visgym", "corners", 1),
        64,
        "77603d3d07ddd54ec92c199cb7b9c377a1d936fc5f58c3e3c5b3248184e37d4a",
        "The seed's task: VisGym's maze_2d/easy (9x9 squares), exactly what reset(seed=i) gives "
        "for i in 0..63 (SkyRL's visgym eval rows); shortest paths 12-16 moves.",
        max_turns=18,  # SkyRL's recipe: the oracle's path plus `stop` always fits
        env=_VISGYM_ENV,
    ),
    "visgym-hard": MazeSet(
        MazeSpec(11, 11, "visgym", "corners", 1),
        64,
        "f109157ab283c81ab421ec6d9d4b5812f628a491975fee0a483f60a2896d8c77",
        "VisGym's maze_2d/hard (11x11 squares), reset(seed=i) for i in 0..63; shortest paths "
        "16-32 moves.",
        max_turns=30,  # the VisGym paper's budget (docs/mazes.md#each-sets-picture-and-prompt)
        env=_VISGYM_ENV,
    ),
}
"""Every named maze set. Add one entry to add a set; nothing else lists them."""


def maze_set(name: str) -> MazeSet:
    """The registered set `name`; an unknown name is a one-line error naming the known ones."""
    if name not in SETS:
        raise UsageError(f"unknown maze set {name!r}: use one of {', '.join(SETS)}")
    return SETS[name]


def set_names() -> tuple[str, ...]:
    """The registered sets' names, in registry order (CLI help, widgets)."""
    return tuple(SETS)
