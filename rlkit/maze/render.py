"""Rendering (pure): maze state -> PIL image, PNG, data URI or ASCII, `full` or agent-centred `ego`
view; a squares maze pixel for pixel as VisGym's maze_2d draws it: docs/mazes.md#pictures."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from rlkit.errors import UsageError
from rlkit.maze.core import Action, Cell, E, Maze, N, S, W
from rlkit.maze.rules import State

RGB = tuple[int, int, int]
VIEWS = ("full", "ego")
_OUTSIDE = 16  # tile index for cells beyond the maze border (ego view padding)


@dataclass(frozen=True)
class RenderStyle:
    """How a maze looks. Hashable: tiles are cached per style."""

    cell_px: int = 8
    """Pixels per cell side (8: one patch a cell for the tiny model)."""
    wall_px: int = 1
    """Wall thickness drawn inside each cell on each walled side."""
    view: str = "ego"
    """`ego` (agent-centred window) or `full` (whole maze)."""
    ego_radius: int = 2
    """Cells visible on each side of the agent in the ego view (2 -> 5x5 cells, padded to 6x6)."""
    show_trail: bool = True
    """Colour visited cells: the model then sees where it has been without image history."""
    floor: RGB = (255, 255, 255)
    wall: RGB = (0, 0, 0)
    outside: RGB = (0, 0, 0)
    trail: RGB = (128, 128, 128)
    last: RGB | None = None
    """Colour of the cell the agent just left (None: as trail, what the model sees)."""
    agent: RGB = (255, 0, 0)
    exit: RGB = (0, 255, 0)
    pad: int = 0
    """Squares game: wall-coloured squares added right and below (1: 9x9 -> 10x10 picture)."""

    def __post_init__(self) -> None:
        if not 2 <= self.cell_px <= 256:
            raise UsageError(f"cell_px ({self.cell_px}) must be in [2, 256]")
        if not 0 < self.wall_px * 2 < self.cell_px:
            raise UsageError(
                f"wall_px ({self.wall_px}) must be >= 1 and leave floor inside a {self.cell_px}px cell"
            )
        if self.view not in VIEWS:
            raise UsageError(f"unknown view {self.view!r}: use one of {', '.join(VIEWS)}")
        if not 1 <= self.ego_radius <= 16:
            raise UsageError(f"ego_radius ({self.ego_radius}) must be in [1, 16]")
        if not 0 <= self.pad <= 4:
            raise UsageError(f"pad ({self.pad}) must be 0..4 squares")


_FLOOR, _TRAIL, _LAST, _EXIT, _AGENT, _OUT = range(6)


@lru_cache(maxsize=64)
def _atlas(style: RenderStyle) -> np.ndarray:
    """(17 * 6, cp, cp, 3) uint8: every (wall mask or outside, cell colour) tile, drawn once."""
    cp, wp = style.cell_px, style.wall_px
    mask, (row, col) = np.arange(16)[:, None, None], np.indices((cp, cp))
    walls = (
        (mask & N > 0) & (row < wp)
        | (mask & S > 0) & (row >= cp - wp)
        | (mask & W > 0) & (col < wp)
        | (mask & E > 0) & (col >= cp - wp)
    )
    last = style.last if style.last is not None else style.trail
    colours = [style.floor, style.trail, last, style.exit, style.agent, style.outside]
    atlas = np.empty((17, len(colours), cp, cp, 3), dtype=np.uint8)
    for ci, colour in enumerate(colours):
        atlas[:, ci] = colour
        atlas[:16, ci][walls] = style.wall
    atlas[16, :] = style.outside
    atlas.setflags(write=False)
    return atlas.reshape(-1, cp, cp, 3)


def _colour_index(state: State, style: RenderStyle) -> np.ndarray:
    maze = state.maze
    idx = np.full((maze.height, maze.width), _FLOOR, dtype=np.intp)
    if style.show_trail and len(state.trail) > 1:
        cells = np.asarray(state.trail)
        idx[cells[:, 0], cells[:, 1]] = _TRAIL
        prev = state.trail[-2]
        if prev != state.pos:
            idx[prev] = _LAST
    idx[maze.exit] = _EXIT
    idx[state.pos] = _AGENT
    return idx


@lru_cache(maxsize=16)
def disc_mask(px: int) -> np.ndarray:
    """(px, px) bool: the agent's disc as pygame fills a circle of radius px // 4 about pixel
    corner (px // 2, px // 2): the midpoint algorithm's spans, columns x0 - w .. x0 + w - 1."""
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


def _squares_array(state: State, style: RenderStyle) -> np.ndarray:
    """The state as VisGym draws it, `style.pad` wall squares added right and below."""
    maze, px = state.maze, style.cell_px
    idx = np.where(maze.squares, 1, 0).astype(np.intp)
    idx[maze.exit] = 2
    idx = np.pad(idx, ((0, style.pad), (0, style.pad)), constant_values=1)
    palette = np.array([style.floor, style.wall, style.exit], dtype=np.uint8)
    img = np.repeat(np.repeat(palette[idx], px, axis=0), px, axis=1)
    disc = disc_mask(px)
    if state.pos != maze.exit and maze.exit in state.trail:  # VisGym's white trace (docs/)
        r, c = maze.exit
        img[r * px : (r + 1) * px, c * px : (c + 1) * px][disc] = style.floor
    r, c = state.pos
    img[r * px : (r + 1) * px, c * px : (c + 1) * px][disc] = style.agent
    return img


def render_array(state: State, style: RenderStyle = RenderStyle()) -> np.ndarray:
    """The state as an (H, W, 3) uint8 array (the fast path the local trainer feeds the model)."""
    if state.maze.game == "squares":
        return _squares_array(state, style)
    tiles = state.maze.walls.astype(np.intp) * 6 + _colour_index(state, style)
    if style.view == "ego":  # (2r+1) cells padded to an even 2r+2, outside cells beyond the border
        r, (pr, pc) = style.ego_radius, state.pos
        n = 2 * r + 2
        padded = np.pad(tiles, n, constant_values=_OUTSIDE * 6 + _OUT)
        tiles = padded[pr - r + n : pr - r + 2 * n, pc - r + n : pc - r + 2 * n]
    img = _atlas(style)[tiles]  # (h, w, cp, cp, 3)
    h, w, cp = tiles.shape[0], tiles.shape[1], style.cell_px
    return img.transpose(0, 2, 1, 3, 4).reshape(h * cp, w * cp, 3)


def render(state: State, style: RenderStyle = RenderStyle()) -> Image.Image:
    """The state as a PIL image."""
    return Image.fromarray(render_array(state, style), mode="RGB")


def render_maze(
    maze: Maze, style: RenderStyle = RenderStyle(view="full", cell_px=16)
) -> Image.Image:
    """A maze at its start, full view by default (galleries, docs)."""
    return render(State(maze=maze, pos=maze.start, trail=(maze.start,)), style)


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # level 1: tiny images, speed over bytes
    return buf.getvalue()


def data_uri(img: Image.Image) -> str:
    """`data:image/png;base64,...`: the image form OpenAI-style chat messages (and vLLM) take."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(img)).decode("ascii")


@lru_cache(maxsize=8192)
def _uri_from_raw(raw: bytes, h: int, w: int) -> str:
    return data_uri(Image.frombytes("RGB", (w, h), raw))


def state_data_uri(state: State, style: RenderStyle = RenderStyle()) -> str:
    """`data_uri(render(state))`, memoised on the pixels (GRPO replays the same states often)."""
    arr = render_array(state, style)
    return _uri_from_raw(arr.tobytes(), arr.shape[0], arr.shape[1])


def image_from_data_uri(uri: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    if not uri.startswith(prefix):
        raise UsageError("expected a 'data:image/png;base64,' URI: images travel as PNG data URIs")
    return Image.open(io.BytesIO(base64.b64decode(uri[len(prefix) :]))).convert("RGB")


def to_ascii(state: State) -> str:
    """Text view: '+---+' walls, '@' agent, 'E' exit, '.' visited; squares: one character a
    square, `#` wall, `.` floor, `o` visited, `A` agent, `T` target (VisGym's letters)."""
    maze, visited = state.maze, state.visited
    if maze.game == "squares":
        chars = np.where(maze.squares, "#", ".")
        for cell in visited:
            if not maze.squares[cell]:
                chars[cell] = "o"
        chars[maze.exit] = "T"
        chars[state.pos] = "A"
        return "\n".join("".join(row) for row in chars)
    lines = []
    for r in range(maze.height):
        top, mid = ["+"], ["|" if maze.walls[r, 0] & 8 else " "]
        for c in range(maze.width):
            m = int(maze.walls[r, c])
            top.append("---+" if m & 1 else "   +")
            ch = {maze.exit: "E", state.pos: "@"}.get((r, c), "." if (r, c) in visited else " ")
            mid.append(f" {ch} " + ("|" if m & 2 else " "))
        lines += ["".join(top), "".join(mid)]
    lines.append("+" + "---+" * maze.width)
    return "\n".join(lines)


def draw_arrow(
    img: Image.Image,
    cell: Cell,
    action: Action,
    style: RenderStyle,
    *,
    colour: RGB = (40, 90, 230),
    origin: Cell = (0, 0),
    scale: int = 1,
) -> Image.Image:
    """A copy of `img` with an arrow for `action` from `cell`; `origin`: the cell drawn at the
    top-left (`ego_origin`), `scale`: the factor `img` was upscaled by."""
    out = img.copy()
    cp = style.cell_px * scale
    cy = (cell[0] - origin[0]) * cp + cp / 2
    cx = (cell[1] - origin[1]) * cp + cp / 2
    dr, dc = action.delta
    end = (cx + dc * cp * 0.9, cy + dr * cp * 0.9)
    draw = ImageDraw.Draw(out)
    width = max(1, cp // 6)
    draw.line([(cx, cy), end], fill=colour, width=width)
    draw.ellipse([end[0] - width, end[1] - width, end[0] + width, end[1] + width], fill=colour)
    return out


def ego_origin(state: State, style: RenderStyle) -> Cell:
    """The maze cell drawn at the top-left of the image (can be outside the maze in ego view)."""
    if style.view == "full" or state.maze.game == "squares":
        return (0, 0)
    return (state.pos[0] - style.ego_radius, state.pos[1] - style.ego_radius)


def upscale(img: Image.Image, factor: int) -> Image.Image:
    """Nearest-neighbour enlargement for display (keeps walls crisp)."""
    return img.resize((img.width * factor, img.height * factor), Image.NEAREST)
