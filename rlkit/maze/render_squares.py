"""The squares game's picture and text, pixel for pixel as VisGym's maze_2d draws them (pure;
returns data): docs/mazes.md#pictures."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from rlkit.maze.rules import State

RGB = tuple[int, int, int]


@lru_cache(maxsize=16)
def disc_mask(px: int) -> np.ndarray:
    """(px, px) bool: the agent's disc inside its square, drawn as pygame fills a circle of
    integer radius px // 4 about the pixel corner (px // 2, px // 2): the midpoint algorithm's
    spans, row y0 + k covering columns x0 - w .. x0 + w - 1."""
    radius, c0 = int(px / 4), int(px / 2)
    half: dict[int, int] = {}

    def span(dy: int, w: int) -> None:
        half[dy] = max(half.get(dy, 0), w)

    f, ddf_x, ddf_y, x, y = 1 - radius, 0, -2 * radius, 0, radius
    while x < y:
        if f >= 0:
            y -= 1
            ddf_y += 2
            f += ddf_y
        x += 1
        ddf_x += 2
        f += ddf_x + 1
        if f >= 0:
            span(y - 1, x)
            span(-y, x)
        span(x - 1, y)
        span(-x, y)
    mask = np.zeros((px, px), dtype=bool)
    for dy, w in half.items():
        r = c0 + dy
        if 0 <= r < px:
            mask[r, max(0, c0 - w) : min(px, c0 + w)] = True
    mask.setflags(write=False)
    return mask


def squares_array(
    state: State, px: int, floor: RGB, wall: RGB, target: RGB, agent: RGB
) -> np.ndarray:
    """The state as VisGym draws it: an (H*px, W*px, 3) uint8 array."""
    maze = state.maze
    idx = np.where(maze.squares, 1, 0).astype(np.intp)
    idx[maze.exit] = 2
    palette = np.array([floor, wall, target], dtype=np.uint8)
    img = np.repeat(np.repeat(palette[idx], px, axis=0), px, axis=1)
    disc = disc_mask(px)
    if state.pos != maze.exit and maze.exit in state.trail:  # VisGym's white trace (see above)
        r, c = maze.exit
        img[r * px : (r + 1) * px, c * px : (c + 1) * px][disc] = floor
    r, c = state.pos
    img[r * px : (r + 1) * px, c * px : (c + 1) * px][disc] = agent
    return img


def squares_ascii(state: State) -> str:
    """Text view, one character a square: `#` wall, `.` floor, `o` visited, `A` agent, `T`
    target (VisGym's letters)."""
    maze = state.maze
    visited = state.visited
    rows = []
    for r in range(maze.height):
        line = []
        for c in range(maze.width):
            cell = (r, c)
            line.append(
                "A"
                if cell == state.pos
                else "T"
                if cell == maze.exit
                else "#"
                if maze.squares[cell]
                else "o"
                if cell in visited
                else "."
            )
        rows.append("".join(line))
    return "\n".join(rows)
