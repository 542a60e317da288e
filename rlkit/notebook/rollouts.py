"""Captured training rollouts as replays: `step_html` writes one step as a page, a player per
group (`rlkit rollouts RUN --export FILE.html`); `RolloutsView` is the job monitor's panel."""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as widgets

from rlkit.errors import RlkitError
from rlkit.notebook.groups import by_group
from rlkit.notebook.player import PaneFrames, Replay, replay, replay_pane
from rlkit.run import Run
from rlkit.run.captures import CapturedEpisode, summarize


def episode_label(e: CapturedEpisode) -> str:
    """`group 3, sample 1: reward 1, advantage +0.71` (under gigpo also its turns' range)."""
    turns = e.turn_advantages
    spread = f" (turns {min(turns):+.2f} to {max(turns):+.2f})" if turns else ""
    return (
        f"group {e.group}, sample {e.trajectory.sample}: reward {e.trajectory.reward:g}, "
        f"advantage {e.advantage:+.2f}{spread}"
    )


def episode_pane(e: CapturedEpisode, *, display_px: int) -> PaneFrames:
    label = f"sample {e.trajectory.sample}: reward {e.trajectory.reward:g}, adv {e.advantage:+.2f}"
    return replay_pane(e.trajectory, label, policy=f"step {e.step}", display_px=display_px)


def step_html(
    run_name: str, step: int, episodes: Sequence[CapturedEpisode], *, display_px: int = 192
) -> str:
    """A self-contained HTML page playing one captured step, one player per group."""
    if not episodes:
        raise ValueError(f"step {step} of {run_name} captured no episodes: nothing to play")
    title = f"{run_name}: training rollouts of step {step}"
    parts = [
        f"<h2>{html.escape(title)}</h2>",
        f"<p>{html.escape(summarize(episodes, step).line())}</p>",
    ]
    for group, eps in by_group(episodes).items():
        rewards = " ".join(f"{e.trajectory.reward:g}" for e in eps)
        maze = eps[0].trajectory.maze_obj.content_hash[:12]
        head = f"group {group} (maze {maze}): rewards {rewards}"
        panes = [episode_pane(e, display_px=display_px) for e in eps]
        parts.append(f"<h3>{html.escape(head)}</h3>")
        parts.append(f"<div style='overflow-x:auto'>{Replay(panes).to_html()}</div>")
    body = "\n".join(parts)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head>\n"
        f"<body style='font-family:sans-serif'>\n{body}\n</body></html>\n"
    )


class RolloutsView(widgets.VBox):
    """A run's newest captured training step: its numbers, a menu of its episodes (keeping its
    group and sample across steps) and the chosen one in the replay player."""

    def __init__(self, *, display_px: int = 256) -> None:
        self.display_px = display_px
        self.step: int | None = None  # the step shown
        self.episodes: list[CapturedEpisode] = []
        self.header = widgets.HTML("<i>training rollouts: none captured yet</i>")
        self.menu = widgets.Dropdown(options=[], description="episode", layout={"width": "28em"})
        self.player = widgets.HTML()
        self._quiet = False
        self.menu.observe(self._picked, names="value")
        super().__init__([self.header, self.menu, self.player])

    def update(self, run: Run | None) -> bool:
        """Show `run`'s newest captured step if new; True when it changed."""
        steps = run.capture_steps() if run is not None else []
        if not steps or steps[-1] == self.step:
            return False
        step = steps[-1]
        try:
            episodes = sorted(run.captures(step), key=lambda e: (e.group, e.trajectory.sample))
        except RlkitError as e:
            self.header.value = f"<i>training rollouts of step {step}: {html.escape(str(e))}</i>"
            return False
        if not episodes:
            return False
        keep = self.menu.value  # the same group and sample if the new step has it, else the index
        shown = [(e.group, e.trajectory.sample) for e in self.episodes]
        new = [(e.group, e.trajectory.sample) for e in episodes]
        was = shown[keep] if keep is not None and keep < len(shown) else None
        index = new.index(was) if was in new else min(keep or 0, len(episodes) - 1)
        self.step, self.episodes = step, episodes
        self.header.value = (
            f"<b>training rollouts</b> ({len(steps)} steps captured): "
            f"{html.escape(summarize(episodes, step).line())}"
        )
        options = [(episode_label(e), i) for i, e in enumerate(episodes)]
        self._quiet = True  # one replay per update, not one per option change
        try:
            self.menu.options, self.menu.value = options, index
        finally:
            self._quiet = False
        self._show(index)
        return True

    def _picked(self, change: dict) -> None:
        if not self._quiet:
            self._show(change["new"])

    def _show(self, index: int | None) -> None:
        if index is None:
            return
        e = self.episodes[index]
        label = f"step {e.step}, {episode_label(e)}"
        self.player.value = replay(e.trajectory, label, display_px=self.display_px).to_html()
