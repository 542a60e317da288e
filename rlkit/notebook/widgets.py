"""Notebook widgets: episode replay, checkpoint diff, maze browser (ipywidgets 8). A replay
shows `rlkit.notebook.player`'s `PaneFrames` on a slider (`Play` drives it through `jslink`) and
displays as that module's kernel-free player too.

    w = ReplayWidget(trajs[3]); w.slider.value = 2; w.text.value   # the answer at turn 3
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as widgets

from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.maze.core import MAX_SIZE, MIN_SIZE, Maze, difficulty
from rlkit.maze.generation import ALGORITHMS, generate
from rlkit.maze.render import RenderStyle, png_bytes, render, to_ascii
from rlkit.maze.rules import initial
from rlkit.notebook.player import (
    REPLAY_STYLE,
    bars_html,
    colour_key,
    disagreement,
    player_html,
    replay_pane,
)
from rlkit.notebook.plots import png_width


class _Pane:
    """Image, info line, move bars and raw text of one episode, at the picture's fixed width;
    `show(i)` holds the last frame past the end."""

    def __init__(self, traj: Trajectory, style: RenderStyle, display_px: int, label: str = ""):
        self.data = replay_pane(traj, label, style=style, display_px=display_px)
        self.label, self.frames, self.move_bars = label, self.data.frames, self.data.bars
        self.captions = self.data.captions
        px = widgets.Layout(width=f"{display_px}px")
        self.image = widgets.Image(format="png", layout=px)
        self.text = widgets.Textarea(
            disabled=True, layout=widgets.Layout(width="100%", height="7em")
        )
        self.info = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.bars = widgets.HTML(layout=widgets.Layout(width="100%"))
        title = widgets.HTML(f"<b>{html.escape(label)}</b>") if label else widgets.HTML()
        self.box = widgets.VBox(
            [title, self.image, self.info, self.bars, self.text],
            layout=widgets.Layout(width=f"{display_px + 8}px", margin="0 24px 0 0"),
        )

    @property
    def n_frames(self) -> int:
        return len(self.frames)

    def show(self, index: int) -> None:
        i = min(index, self.n_frames - 1)
        self.image.value = self.frames[i]
        self.text.value = self.data.text[i]
        self.info.value = (
            "<div style='font-family:monospace;font-size:0.8em;white-space:normal;"
            f"word-break:break-word'>{html.escape(self.data.info[i])}</div>"
        )
        self.bars.value = bars_html(self.move_bars[i])


class _Replay(widgets.VBox):
    """Panes on one Play/slider (a shorter episode holds its last frame) that also displays as
    the kernel-free HTML/JS player (`text/html`)."""

    def __init__(self, panes: Sequence[_Pane], interval_ms: int, note_html: str = ""):
        self.panes, self.interval_ms, self.note_html = tuple(panes), interval_ms, note_html
        n = max(p.n_frames for p in self.panes)
        self.play = widgets.Play(min=0, max=n - 1, step=1, interval=interval_ms)
        self.slider = widgets.IntSlider(min=0, max=n - 1, description="frame")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        # the Python-side mirror makes `play.value = k` work headless
        self.play.observe(lambda change: setattr(self.slider, "value", change["new"]), "value")
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        self._show(0)
        note = [widgets.HTML(note_html)] if note_html else []
        boxes = [p.box for p in self.panes]
        panes_box = boxes[0] if len(boxes) == 1 else widgets.HBox(boxes)
        controls = widgets.HBox([self.play, self.slider])
        super().__init__([controls, *note, panes_box, widgets.HTML(colour_key())])

    def _show(self, index: int) -> None:
        for pane in self.panes:
            pane.show(index)

    def to_html(self) -> str:
        """The same frames as a self-contained player that needs no kernel."""
        panes = [p.data for p in self.panes]
        return player_html(panes, self.interval_ms, colour_key(), self.note_html)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/html"] = self.to_html()
        return bundle


class ReplayWidget(_Replay):
    """Scrub through one episode: frame, model answer, parsed move, oracle move, outcome."""

    def __init__(
        self,
        trajectory: Trajectory,
        style: RenderStyle = REPLAY_STYLE,
        *,
        display_px: int = 256,
        interval_ms: int = 600,
        label: str = "",
    ):
        self.pane = _Pane(trajectory, style, display_px, label)
        self.frames, self.image = self.pane.frames, self.pane.image
        self.text, self.info = self.pane.text, self.pane.info
        super().__init__([self.pane], interval_ms)


class CheckpointDiffWidget(_Replay):
    """The same maze played by two policies side by side on one slider, with `disagreement`."""

    def __init__(
        self,
        traj_a: Trajectory,
        traj_b: Trajectory,
        labels: Sequence[str] = ("A", "B"),
        style: RenderStyle = REPLAY_STYLE,
        *,
        display_px: int = 256,
        interval_ms: int = 600,
    ):
        if len(labels) != 2:
            raise UsageError(f"labels needs two names (one per episode), got {list(labels)}")
        if traj_a.maze_obj != traj_b.maze_obj:
            raise UsageError("the two episodes are on different mazes: pick the same maze index")
        self.disagreement = disagreement(traj_a, traj_b, labels)
        note = (
            f"<div class='rlkit-disagreement' style='font-size:0.85em;margin:0.3em 0'>"
            f"{html.escape(self.disagreement)}</div>"
        )
        panes = [
            _Pane(t, style, display_px, label)
            for t, label in zip((traj_a, traj_b), labels, strict=True)
        ]
        super().__init__(panes, interval_ms, note)


# maze browser


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
    """Cell size that draws a `size`-cell maze at about BROWSER_PX, pixel for pixel."""
    return max(4, min(160, BROWSER_PX // size))


class MazeBrowser(widgets.VBox):
    """Size/seed/algorithm controls and an image or ASCII view of the resulting maze."""

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
        super().__init__(
            [
                widgets.HBox([self.size, self.seed]),
                self.algorithm,
                self.placement,
                self.view,
                self.stats,
                self.image,
                self.ascii,
            ]
        )

    def update(self) -> None:
        size = self.size.value
        self.maze, png, text, stats = maze_view(
            size,
            self.seed.value,
            self.algorithm.value,
            self.placement.value,
            cell_px=browser_cell_px(size),
        )
        self.image.value = png
        self.image.layout.width = f"{png_width(png)}px"  # drawn at display size, not stretched
        self.ascii.value = f"<pre style='line-height:1.1'>{html.escape(text)}</pre>"
        self.stats.value = f"<code>{html.escape(stats)}</code>"
        ascii_view = self.view.value == "ASCII"
        self.image.layout.display = "none" if ascii_view else None
        self.ascii.layout.display = None if ascii_view else "none"


def maze_browser(size: int = 5, seed: int = 0, algorithm: str = "wilson") -> MazeBrowser:
    """An interactive maze browser for notebook 01."""
    return MazeBrowser(size, seed, algorithm)
