"""Replays that play with no kernel: one self-contained HTML/JS player per episode (or pair).

The live ipywidgets (`rlkit.notebook.widgets`) need a kernel to change frames. An executed
notebook opened later, or any static viewer, has none: there the same frames play from this
player, with every frame embedded as a PNG data URL (and its move-probability bars as numbers
the script draws) and play/pause, step and a slider in the browser. The replay widgets put it in their display bundle as `text/html`, and the notebooks
`rlkit demo` writes keep that form (`kernel_free_outputs`), so they play as opened.
"""

from __future__ import annotations

import base64
import html
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from rlkit.maze.render import RenderStyle
from rlkit.notebook.move_bars import BARS_JS, MoveBars, bars_html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

RGB = tuple[int, int, int]


def colour_key_html(style: RenderStyle, oracle: RGB, model: RGB) -> str:
    """One line of coloured swatches naming each colour of a replay frame drawn in `style`
    with the oracle's and the model's arrows in `oracle` and `model`."""
    key = [(style.agent, "agent"), (style.exit, "exit"), (style.trail, "trail")]
    if style.last is not None:
        key.append((style.last, "previous cell"))
    key += [(oracle, "oracle's move"), (model, "model's move (under blue when they agree)")]
    items = "".join(
        "<span style='display:inline-block;width:0.9em;height:0.9em;border:1px solid #444;"
        f"background:rgb{tuple(c)};vertical-align:middle;margin:0 0.3em 0 0.9em'></span>"
        f"{html.escape(name)}"
        for c, name in key
    )
    return f"<div class='rlkit-key' style='font-size:0.85em;margin-top:0.3em'>{items}</div>"


@dataclass(frozen=True)
class PaneFrames:
    """One episode as the player shows it: a PNG and two caption lines per frame."""

    label: str
    frames: Sequence[bytes]
    info: Sequence[str]
    """One line per frame: turn, parsed move, oracle move, or the outcome."""
    text: Sequence[str]
    """The model's raw answer per frame."""
    width_px: int
    bars: Sequence[MoveBars] | None = None
    """The policy's move probabilities per frame (`rlkit.notebook.move_bars`); None: no bars."""

    def __post_init__(self) -> None:
        if not self.frames or not len(self.frames) == len(self.info) == len(self.text):
            raise ValueError("a pane needs one PNG, info line and text per frame (at least one)")
        if self.bars is not None and len(self.bars) != len(self.frames):
            raise ValueError(f"{len(self.bars)} move-bar sets for {len(self.frames)} frames")


_SCRIPT = """
(function () {
BARS_JS
  var root = document.currentScript.parentElement;
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
  show(0);
})();
"""


def player_html(
    panes: Sequence[PaneFrames], interval_ms: int = 600, key_html: str = "", note_html: str = ""
) -> str:
    """A self-contained player for `panes` on one slider (a shorter episode holds its end),
    with `note_html` above the panes and `key_html` (e.g. `colour_key_html(...)`) under them."""
    if not panes:
        raise ValueError("the player needs at least one pane")
    n = max(len(p.frames) for p in panes)
    data = [
        {
            "frames": [base64.b64encode(f).decode("ascii") for f in p.frames],
            "info": list(p.info),
            "text": list(p.text),
            "bars": None if p.bars is None else [b.to_data() for b in p.bars],
        }
        for p in panes
    ]
    boxes = "".join(
        f"<div class='rlkit-pane' style='width:{p.width_px}px;flex:none'>"
        f"<b>{html.escape(p.label)}</b><br>"
        f"<img class='rlkit-frame' width='{p.width_px}' alt='maze frame' "
        f"style='image-rendering:pixelated' "
        f"src='data:image/png;base64,{data[k]['frames'][0]}'>"
        f"<pre class='rlkit-info' style='white-space:pre-wrap;font-size:0.8em;margin:0.3em 0'>"
        f"{html.escape(p.info[0])}</pre>"
        f"{bars_html(p.bars[0]) if p.bars is not None else ''}"
        f"<pre class='rlkit-text' style='white-space:pre-wrap;font-size:0.8em;margin:0;"
        f"max-height:7em;overflow:auto;background:#f4f4f4'>{html.escape(p.text[0])}</pre>"
        "</div>"
        for k, p in enumerate(panes)
    )
    button = "style='margin-right:0.4em'"
    # "</" or "<!--" in a caption would end or derail the data script: "\u003c" is the same
    # JSON string with no "<" in the page
    payload = json.dumps(data).replace("<", "\\u003c")
    uid = secrets.token_hex(4)
    return (
        f"<div class='rlkit-player' id='rlkit-player-{uid}'>"
        f"<div style='margin-bottom:0.4em'>"
        f"<button class='rlkit-play' {button}>&#9654; Play</button>"
        f"<button class='rlkit-prev' {button}>&#9664;</button>"
        f"<button class='rlkit-next' {button}>&#9654;|</button>"
        f"<input class='rlkit-slider' type='range' min='0' max='{n - 1}' value='0' "
        f"style='width:14em;vertical-align:middle'> "
        f"<span class='rlkit-counter'>frame 1/{n}</span></div>"
        f"{note_html}"
        f"<div style='display:flex;gap:24px;align-items:flex-start'>{boxes}</div>"
        f"{key_html}"
        f"<script type='application/json' class='rlkit-data'>{payload}</script>"
        f"<script>{_SCRIPT.replace('BARS_JS', BARS_JS).replace('INTERVAL', str(int(interval_ms)))}"
        "</script>"
        "</div>"
    )


def kernel_free_outputs(notebook: dict) -> int:
    """Keep the HTML player of every output that also has a widget view; returns how many.

    An executed notebook's widget views need a kernel to play (their stored state is one
    frame); dropping the view lets JupyterLab and static viewers show the player instead.
    Outputs with no HTML form (the maze browser, the job monitor) keep their widget views.
    """
    changed = 0
    for cell in notebook.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
                changed += 1
    return changed


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_REF = "IPY_MODEL_"
"""How a widget's state names another widget (ipywidgets' `widget_serialization`)."""
LINK_MODELS = frozenset({"LinkModel", "DirectionalLinkModel"})
"""Models nothing refers to that still belong to what is shown: a `jslink` between two shown
widgets (a Play driving its slider) lives only in the link's own state."""


def _refs(value: object) -> set[str]:
    if isinstance(value, str):
        return {value[len(MODEL_REF) :]} if value.startswith(MODEL_REF) else set()
    if isinstance(value, dict):
        return set().union(*map(_refs, value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*map(_refs, value)) if value else set()
    return set()


def shown_widget_state(notebook: dict) -> tuple[int, int]:
    """Keep in the notebook's saved widget state only the models an output shows: those its
    widget views name, everything they refer to (children, layouts, styles, images), and the
    links between them; returns (kept, dropped).

    The executing kernel saves every widget it ever made (nbclient keeps a model once opened),
    so a job monitor that replaced its training-rollouts replay on every captured step left
    each old replay's frames in the file (the demo's notebook 03: 2,794 models, 3.5 MB, for
    one shown). A view that `kernel_free_outputs` turned into its HTML player names no model.
    """
    meta = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE)
    if not meta or not meta.get("state"):
        return 0, 0
    state: dict[str, dict] = meta["state"]
    shown = {
        out["data"][WIDGET_VIEW]["model_id"]
        for cell in notebook.get("cells", [])
        for out in cell.get("outputs", [])
        if WIDGET_VIEW in out.get("data", {})
    }
    keep: set[str] = set()
    todo = [m for m in shown if m in state]
    while todo:
        model = todo.pop()
        if model not in keep:
            keep.add(model)
            todo += [m for m in _refs(state[model].get("state", {})) if m in state]
    keep |= {
        model
        for model, entry in state.items()
        if entry.get("model_name") in LINK_MODELS
        and (ends := _refs(entry.get("state", {})))
        and ends <= keep
    }
    dropped = len(state) - len(keep)
    if keep:
        meta["state"] = {model: entry for model, entry in state.items() if model in keep}
    else:  # every view became its HTML player (notebook 05): no widget state to save
        del notebook["metadata"]["widgets"]
    return len(keep), dropped
