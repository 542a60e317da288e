"""Move-probability bars (how sure the policy was of each move at each turn): one markup
(`bars_html`) that the player's script (`BARS_JS`) rewrites per frame; `disagreement` says where
two checkpoints first chose differently.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlkit.episodes.rollout import Trajectory
from rlkit.maze.core import Action

MOVES = tuple(a.word for a in Action)
NO_PROBS = "no probabilities recorded"
EPISODE_OVER = "episode over: no move"
CHOSEN_RGB = (245, 140, 20)
"""The model arrow's orange in the replay frames."""
OTHER_RGB = (160, 160, 160)


@dataclass(frozen=True)
class MoveBars:
    """One frame's bars: the four probabilities (or None) and the chosen move's index."""

    probs: tuple[float, ...] | None
    chosen: int | None
    note: str = ""

    def to_data(self) -> dict:
        """Compact JSON for the kernel-free player."""
        p = None if self.probs is None else list(self.probs)
        return {"p": p, "c": self.chosen, "n": self.note}


def move_bars(traj: Trajectory) -> list[MoveBars]:
    """One `MoveBars` per replay frame: each turn's, then the end frame's (no move)."""
    out = []
    for turn in traj.turns:
        word = turn.actions[0] if turn.actions else None
        chosen = Action[word.upper()].value if word in MOVES else None  # `stop`: no bar
        if turn.move_probs is None:
            out.append(MoveBars(None, chosen, NO_PROBS))
        else:
            out.append(MoveBars(tuple(round(p, 4) for p in turn.move_probs), chosen))
    out.append(MoveBars(None, None, EPISODE_OVER))
    return out


def percent_text(p: float) -> str:
    """Whole percent, halves rounded up as the player's script (`toFixed`) rounds them."""
    return f"{math.floor(100 * p + 0.5)}%" if p >= 0.01 or p == 0 else "<1%"


def bars_html(bars: MoveBars) -> str:
    """The four bars as inline-styled HTML (classes `rlkit-bar-*` for the player's script)."""
    rows = []
    for k, move in enumerate(MOVES):
        p = 0.0 if bars.probs is None else bars.probs[k]
        chosen = k == bars.chosen and bars.probs is not None
        colour = CHOSEN_RGB if chosen else OTHER_RGB
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


BARS_JS = """
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
""".replace("CHOSEN", f"rgb{CHOSEN_RGB}").replace("OTHER", f"rgb{OTHER_RGB}")


def first_disagreement(a: Trajectory, b: Trajectory) -> int | None:
    """The first turn (0-based) where `a` and `b`, on the same cell, chose different moves;
    None if they never did before an episode ended or their paths parted."""
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
    """One sentence: where the two episodes first chose differently on the same cell, and how
    sure each policy was of its move there."""
    i = first_disagreement(a, b)
    if i is None:
        return f"{labels[0]} and {labels[1]} chose the same move on every cell they shared."
    same = {0: "", 1: "same move at turn 1; "}.get(i, f"same moves for turns 1-{i}; ")
    text = (
        f"{same}at turn {i + 1}, on cell {tuple(a.turns[i].pos_before)}, "
        f"{_sureness(a.turns[i], labels[0])}; {_sureness(b.turns[i], labels[1])}."
    )
    return text[0].upper() + text[1:]
