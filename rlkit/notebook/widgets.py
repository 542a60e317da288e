"""The maze browser (ipywidgets 8): size, seed, generator and start/exit controls over a
generated maze, drawn as an image or as ASCII: `MazeBrowser(size=6, seed=3)`."""

from __future__ import annotations

import html

import ipywidgets as widgets

from rlkit.maze.core import MAX_SIZE, MIN_SIZE, Maze, difficulty
from rlkit.maze.generation import ALGORITHMS, generate
from rlkit.maze.render import RenderStyle, png_bytes, render, to_ascii
from rlkit.maze.rules import initial
from rlkit.notebook.plots import png_width


def maze_view(
    size: int,
    seed: int,
    algorithm: str = "wilson",
    placement: str = "corners",
    *,
    cell_px: int = 24,
) -> tuple[Maze, bytes, str, str]:
    """(maze, PNG bytes, ASCII, stats line) for one generated maze."""
    maze = generate(size, size, seed, algorithm=algorithm, placement=placement)
    png = png_bytes(render(initial(maze), RenderStyle(view="full", cell_px=cell_px)))
    d = difficulty(maze)
    stats = (
        f"{size}x{size} {algorithm} seed {seed}: path {d.path_length} moves, "
        f"{d.turns} turns, {d.junctions} junctions, {d.dead_ends} dead ends"
    )
    return maze, png, to_ascii(initial(maze)), stats


BROWSER_PX = 480


def browser_cell_px(size: int) -> int:
    """Cell size that draws a `size`-cell maze at about BROWSER_PX."""
    return max(4, min(160, BROWSER_PX // size))


class MazeBrowser(widgets.VBox):
    """Size/seed/generator controls and an image or ASCII view of the resulting maze."""

    def __init__(self, size: int = 5, seed: int = 0, algorithm: str = "wilson"):
        self.size = widgets.IntSlider(value=size, min=MIN_SIZE, max=MAX_SIZE, description="size")
        self.seed = widgets.IntSlider(value=seed, min=0, max=999, description="seed")
        labelled = {"description_width": "6em"}
        self.algorithm = widgets.ToggleButtons(
            options=ALGORITHMS, value=algorithm, description="generator", style=labelled
        )
        self.placement = widgets.ToggleButtons(
            options=("corners", "random"), value="corners", description="start/exit", style=labelled
        )
        self.view = widgets.ToggleButtons(
            options=("image", "ASCII"), value="image", description="view", style=labelled
        )
        self.image = widgets.Image(format="png")
        self.ascii = widgets.HTML()
        self.stats = widgets.HTML()
        self.maze: Maze | None = None
        for control in (self.size, self.seed, self.algorithm, self.placement, self.view):
            control.observe(lambda _: self.update(), names="value")
        self.update()
        rows = [self.algorithm, self.placement, self.view, self.stats, self.image, self.ascii]
        super().__init__([widgets.HBox([self.size, self.seed]), *rows])

    def update(self) -> None:
        size = self.size.value
        choice = (size, self.seed.value, self.algorithm.value, self.placement.value)
        self.maze, png, text, stats = maze_view(*choice, cell_px=browser_cell_px(size))
        self.image.value = png
        self.image.layout.width = f"{png_width(png)}px"  # drawn at display size, not stretched
        self.ascii.value = f"<pre style='line-height:1.1'>{html.escape(text)}</pre>"
        self.stats.value = f"<code>{html.escape(stats)}</code>"
        ascii_view = self.view.value == "ASCII"
        self.image.layout.display = "none" if ascii_view else None
        self.ascii.layout.display = None if ascii_view else "none"
