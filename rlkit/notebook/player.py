"""The replay player, which plays with no kernel in a page, a cell's output or an
`ipywidgets.HTML`: a pane is one episode (a PNG a frame, oracle's move blue, model's orange,
info line, answer, move-probability bars).

    replay(traj, "step 40")                                       # a cell's output
    ipywidgets.HTML(checkpoint_diff(a, b, ("step 0", "step 40")).to_html())  # among widgets
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlkit.episodes.failures import classify
from rlkit.episodes.rollout import Trajectory, replay_states
from rlkit.errors import UsageError
from rlkit.maze.core import STOP, Action
from rlkit.maze.core import optimal_action as oracle_action
from rlkit.maze.render import RenderStyle, draw_arrow, ego_origin, png_bytes, render, upscale

MOVES = tuple(a.word for a in Action)
NO_PROBS = "no probabilities recorded"
EPISODE_OVER = "episode over: no move"
ORACLE_COLOUR = (40, 90, 230)
MODEL_COLOUR = (245, 140, 20)
OTHER_RGB = (160, 160, 160)


@dataclass(frozen=True)
class MoveBars:
    """One frame's bars: the four move probabilities (or None), the chosen move's index, a note."""

    probs: tuple[float, ...] | None
    chosen: int | None
    note: str = ""


def move_bars(traj: Trajectory) -> list[MoveBars]:
    """One `MoveBars` per replay frame: each turn's, then the end frame's."""
    out = []
    for turn in traj.turns:
        word = turn.actions[0] if turn.actions else None
        chosen = Action[word.upper()].value if word in MOVES else None  # `stop`: no bar
        probs = None if turn.move_probs is None else tuple(round(p, 4) for p in turn.move_probs)
        out.append(MoveBars(probs, chosen, NO_PROBS if probs is None else ""))
    out.append(MoveBars(None, None, EPISODE_OVER))
    return out


def percent_text(p: float) -> str:
    """Whole percent, halves rounded up as the player's script (`toFixed`) does."""
    return f"{math.floor(100 * p + 0.5)}%" if p >= 0.01 or p == 0 else "<1%"


def bars_html(bars: MoveBars) -> str:
    """The four bars as inline-styled HTML (classes `rlkit-bar-*` for the player's script)."""
    rows = []
    for k, move in enumerate(MOVES):
        p = 0.0 if bars.probs is None else bars.probs[k]
        chosen = k == bars.chosen and bars.probs is not None
        colour = MODEL_COLOUR if chosen else OTHER_RGB
        rows.append(
            "<div class='rlkit-bar' style='display:flex;align-items:center;height:13px'>"
            f"<span class='rlkit-bar-move' style='width:3.4em;"
            f"font-weight:{'bold' if chosen else 'normal'}'>{move}</span>"
            "<span style='flex:1;height:9px;background:#eee'>"
            f"<span class='rlkit-bar-fill' style='display:block;height:100%;"
            f"width:{100 * p:.3f}%;background:rgb{colour}'></span></span>"
            f"<span class='rlkit-bar-pct' style='width:3.2em;text-align:right'>"
            f"{percent_text(p) if bars.probs is not None else ''}</span></div>"
        )
    return (
        "<div class='rlkit-bars' title='the policy&#39;s probability of each move' "
        "style='font-family:monospace;font-size:11px;margin:0.2em 0;padding-right:8px'>"
        f"{''.join(rows)}<div class='rlkit-bar-note' style='color:#777'>"
        f"{html.escape(bars.note)}</div></div>"
    )


def first_disagreement(a: Trajectory, b: Trajectory) -> int | None:
    """The first turn (0-based) where `a` and `b` chose differently on one cell; None if none."""
    for i, (ta, tb) in enumerate(zip(a.turns, b.turns, strict=False)):
        if tuple(ta.pos_before) != tuple(tb.pos_before):
            return None
        if ta.actions[:1] != tb.actions[:1]:
            return i
    return None


def _sureness(turn, label: str) -> str:
    move = turn.actions[0] if turn.actions else "no parsable move"
    if turn.move_probs is None:
        return f"{label} chose {move} ({NO_PROBS})"
    ranked = sorted(zip(MOVES, turn.move_probs, strict=True), key=lambda mp: -mp[1])
    p = dict(ranked)
    if not turn.actions:
        top, pt = ranked[0]
        return f"{label} wrote no parsable move (its likeliest: {top} at {percent_text(pt)})"
    alt, q = next((m, q) for m, q in ranked if m != move)
    if q < 0.005:
        return f"{label} chose {move} at {percent_text(p[move])}"
    which = "next" if p[move] >= q else "likeliest"
    return f"{label} chose {move} at {percent_text(p[move])} ({which}: {alt} at {percent_text(q)})"


def disagreement(a: Trajectory, b: Trajectory, labels: Sequence[str]) -> str:
    """One sentence: where the episodes first chose differently on one cell, how sure of it each."""
    i = first_disagreement(a, b)
    if i is None:
        return f"{labels[0]} and {labels[1]} chose the same move on every cell they shared."
    same = {0: "", 1: "same move at turn 1; "}.get(i, f"same moves for turns 1-{i}; ")
    text = (
        f"{same}at turn {i + 1}, on cell {tuple(a.turns[i].pos_before)}, "
        f"{_sureness(a.turns[i], labels[0])}; {_sureness(b.turns[i], labels[1])}."
    )
    return text[0].upper() + text[1:]


REPLAY_STYLE = RenderStyle(view="full", cell_px=16, last=(90, 90, 90))


def replay_frames(
    traj: Trajectory, style: RenderStyle = REPLAY_STYLE, *, display_px: int = 256
) -> list[bytes]:
    """A PNG per turn (its state, the oracle's and the model's moves drawn), then the end's."""
    frames = []
    for i, state in enumerate(replay_states(traj)):
        img = render(state, style)
        scale = max(1, display_px // max(img.size))
        img, origin = upscale(img, scale), ego_origin(state, style)
        turn = i < len(traj.turns)  # the final frame has no move to draw
        words = traj.turns[i].actions if turn else []
        # `stop` (VisGym's game) has no direction to draw; the oracle's arrow goes on top
        model = Action[words[0].upper()] if words and words[0] != STOP.word else None
        best = oracle_action(state.maze, state.pos) if turn else None
        for move, c in ((model, MODEL_COLOUR), (best, ORACLE_COLOUR)):
            if move is not None:
                img = draw_arrow(img, state.pos, move, style, colour=c, origin=origin, scale=scale)
        frames.append(png_bytes(img))
    return frames


@dataclass(frozen=True)
class Caption:
    """What a frame says besides its picture."""

    text: str
    """The model's raw answer at this turn ("" on the final frame)."""
    info: str
    """One line: turn, parsed action, oracle move and position change, or the outcome."""


def replay_captions(traj: Trajectory, policy: str | None = None) -> list[Caption]:
    """One caption per frame of `replay_frames`; the end names `policy` (else the trajectory's)."""
    states = replay_states(traj)
    n = len(traj.turns)
    out = []
    for i, turn in enumerate(traj.turns):
        best = oracle_action(states[i].maze, states[i].pos)
        parsed = ", ".join(turn.actions) if turn.actions else f"parse error: {turn.parse_error}"
        moved = "stayed (wall bump)" if turn.pos_before == turn.pos_after else "moved"
        info = (
            f"turn {i + 1}/{n} | parsed: {parsed} | oracle: {best.word if best is not None else '-'} | "
            f"{moved} {tuple(turn.pos_before)} -> {tuple(turn.pos_after)}"
        )
        out.append(Caption(turn.text, info))
    if traj.solved:
        outcome = f"SOLVED in {n} turns"
    else:
        ending = "truncated (turn budget)" if traj.truncated else "not finished"
        outcome = f"FAILED: {ending}, kind {classify(traj)}"
    who = policy or traj.policy
    out.append(Caption("", f"end | {outcome} | reward {traj.reward:g} | policy {who}"))
    return out


def colour_key() -> str:
    """One line of swatches naming each colour of a replay frame."""
    style = REPLAY_STYLE
    key = [
        (style.agent, "agent"),
        (style.exit, "exit"),
        (style.trail, "trail"),
        (style.last, "previous cell"),
        (ORACLE_COLOUR, "oracle's move"),
        (MODEL_COLOUR, "model's move (under blue when they agree)"),
    ]
    items = "".join(
        "<span style='display:inline-block;width:0.9em;height:0.9em;border:1px solid #444;"
        f"background:rgb{tuple(c)};vertical-align:middle;margin:0 0.3em 0 0.9em'></span>"
        f"{html.escape(name)}"
        for c, name in key
    )
    return f"<div class='rlkit-key' style='font-size:0.85em;margin-top:0.3em'>{items}</div>"


@dataclass(frozen=True)
class PaneFrames:
    """One episode as the player shows it: per frame a PNG, an info line and a text."""

    label: str
    frames: Sequence[bytes]
    info: Sequence[str]
    text: Sequence[str]
    width_px: int
    """Display width of the frames, in CSS pixels."""
    bars: Sequence[MoveBars] | None = None

    def __post_init__(self) -> None:
        if not self.frames or not len(self.frames) == len(self.info) == len(self.text):
            raise ValueError("a pane needs one PNG, info line and text per frame (at least one)")
        if self.bars is not None and len(self.bars) != len(self.frames):
            raise ValueError(f"{len(self.bars)} move-bar sets for {len(self.frames)} frames")


def replay_pane(
    traj: Trajectory,
    label: str = "",
    *,
    policy: str | None = None,
    display_px: int = 256,
) -> PaneFrames:
    """`traj` as one pane (the end caption names `policy`, else `label`)."""
    captions = replay_captions(traj, policy=policy or label or None)
    return PaneFrames(
        label,
        replay_frames(traj, display_px=display_px),
        [c.info for c in captions],
        [c.text for c in captions],
        display_px,
        move_bars(traj),
    )


# The script is the first frame's `onload`, not a <script>: a page, a trusted output and an
# `ipywidgets.HTML` (innerHTML never runs a <script>) all run it; it starts once per player.
_SCRIPT = """
var root = this.closest('.rlkit-player');
if (root.rlkitReady) { return; }
root.rlkitReady = true;
function rlkitBars(el, d) {
  var fills = el.querySelectorAll('.rlkit-bar-fill');
  var pcts = el.querySelectorAll('.rlkit-bar-pct');
  var moves = el.querySelectorAll('.rlkit-bar-move');
  for (var k = 0; k < fills.length; k++) {
    var p = d.p ? d.p[k] : 0;
    var chosen = !!d.p && d.c === k;
    fills[k].style.width = (100 * p).toFixed(3) + '%';
    fills[k].style.background = chosen ? 'CHOSEN' : 'OTHER';
    moves[k].style.fontWeight = chosen ? 'bold' : 'normal';
    pcts[k].textContent = !d.p ? '' : (p >= 0.01 || p === 0 ? (100 * p).toFixed(0) + '%' : '<1%');
  }
  el.querySelector('.rlkit-bar-note').textContent = d.n;
}
var panes = JSON.parse(root.querySelector('script.rlkit-data').textContent);
var n = Math.max.apply(null, panes.map(function (p) { return p.frames.length; }));
var slider = root.querySelector('.rlkit-slider');
var play = root.querySelector('.rlkit-play');
var counter = root.querySelector('.rlkit-counter');
var imgs = root.querySelectorAll('.rlkit-frame');
var infos = root.querySelectorAll('.rlkit-info');
var texts = root.querySelectorAll('.rlkit-text');
var boxes = root.querySelectorAll('.rlkit-pane');
var timer = null;
function show(i) {
  i = Math.max(0, Math.min(n - 1, i));
  slider.value = i;
  counter.textContent = 'frame ' + (i + 1) + '/' + n;
  panes.forEach(function (p, k) {
    var j = Math.min(i, p.frames.length - 1);
    imgs[k].src = 'data:image/png;base64,' + p.frames[j];
    infos[k].textContent = p.info[j];
    texts[k].textContent = p.text[j];
    var el = boxes[k].querySelector('.rlkit-bars');
    if (p.bars && el) { rlkitBars(el, p.bars[j]); }
  });
}
function stop() { clearInterval(timer); timer = null; play.textContent = '\\u25b6 Play'; }
play.onclick = function () {
  if (timer) { stop(); return; }
  if (+slider.value >= n - 1) { show(0); }
  play.textContent = 'Pause';
  timer = setInterval(function () {
    if (+slider.value >= n - 1) { stop(); } else { show(+slider.value + 1); }
  }, INTERVAL);
};
root.querySelector('.rlkit-prev').onclick = function () { stop(); show(+slider.value - 1); };
root.querySelector('.rlkit-next').onclick = function () { stop(); show(+slider.value + 1); };
slider.oninput = function () { stop(); show(+slider.value); };
""".replace("CHOSEN", f"rgb{MODEL_COLOUR}").replace("OTHER", f"rgb{OTHER_RGB}")


@dataclass(frozen=True)
class Replay:
    """Episodes on one slider as a self-contained player (a shorter episode holds its end)."""

    panes: Sequence[PaneFrames]
    note: str = ""
    """A line above the panes: a checkpoint diff's `disagreement`."""
    interval_ms: int = 600

    def __post_init__(self) -> None:
        if not self.panes:
            raise ValueError("the player needs at least one pane")

    def to_html(self) -> str:
        """The player: every frame embedded, the colour key under the panes."""
        n = max(len(p.frames) for p in self.panes)
        data = [
            {
                "frames": [base64.b64encode(f).decode("ascii") for f in p.frames],
                "info": list(p.info),
                "text": list(p.text),
                "bars": None
                if p.bars is None
                else [{"p": b.probs, "c": b.chosen, "n": b.note} for b in p.bars],
            }
            for p in self.panes
        ]
        script = _SCRIPT.replace("INTERVAL", str(self.interval_ms))
        boxes = "".join(
            f"<div class='rlkit-pane' style='width:{p.width_px}px;flex:none'>"
            f"<b>{html.escape(p.label)}</b><br>"
            f"<img class='rlkit-frame' width='{p.width_px}' alt='maze frame' "
            f"style='image-rendering:pixelated' "
            + (f'onload="{html.escape(script)}" ' if k == 0 else "")
            + f"src='data:image/png;base64,{data[k]['frames'][0]}'>"
            f"<pre class='rlkit-info' style='white-space:pre-wrap;font-size:0.8em;margin:0.3em 0'>"
            f"{html.escape(p.info[0])}</pre>"
            f"{bars_html(p.bars[0]) if p.bars is not None else ''}"
            f"<pre class='rlkit-text' style='white-space:pre-wrap;font-size:0.8em;margin:0;"
            f"max-height:7em;overflow:auto;background:#f4f4f4'>{html.escape(p.text[0])}</pre>"
            "</div>"
            for k, p in enumerate(self.panes)
        )
        note = self.note and (
            "<div class='rlkit-disagreement' style='font-size:0.85em;margin:0.3em 0'>"
            f"{html.escape(self.note)}</div>"
        )
        button = "style='margin-right:0.4em'"
        # "</" or "<!--" in a caption would end the data script: "\u003c" is the same JSON string
        payload = json.dumps(data).replace("<", "\\u003c")
        return (
            "<div class='rlkit-player'>"
            "<div style='margin-bottom:0.4em'>"
            f"<button class='rlkit-play' {button}>&#9654; Play</button>"
            f"<button class='rlkit-prev' {button}>&#9664;</button>"
            f"<button class='rlkit-next' {button}>&#9654;|</button>"
            f"<input class='rlkit-slider' type='range' min='0' max='{n - 1}' value='0' "
            f"style='width:14em;vertical-align:middle'> "
            f"<span class='rlkit-counter'>frame 1/{n}</span></div>"
            f"{note}<div style='display:flex;gap:24px;align-items:flex-start'>{boxes}</div>"
            f"{colour_key()}"
            f"<script type='application/json' class='rlkit-data'>{payload}</script></div>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()


def replay(traj: Trajectory, label: str = "", *, display_px: int = 256) -> Replay:
    """Step through one episode (`replay_pane`)."""
    return Replay([replay_pane(traj, label, display_px=display_px)])


def checkpoint_diff(
    traj_a: Trajectory, traj_b: Trajectory, labels: Sequence[str] = ("A", "B")
) -> Replay:
    """One maze played by two policies side by side on one slider, under their `disagreement`."""
    if len(labels) != 2:
        raise UsageError(f"labels needs two names (one per episode), got {list(labels)}")
    if traj_a.maze_obj != traj_b.maze_obj:
        raise UsageError("the two episodes are on different mazes: pick the same maze index")
    panes = [replay_pane(t, label) for t, label in zip((traj_a, traj_b), labels, strict=True)]
    return Replay(panes, disagreement(traj_a, traj_b, labels))
