"""The kernel-free replay player, what executed notebooks keep of a replay, and notebook paths."""

import base64
import json
import re
from pathlib import Path

import ipywidgets
import nbformat
import pytest
from IPython.core.formatters import DisplayFormatter
from nbformat.sign import NotebookNotary

from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.maze.generation import generate
from rlkit.notebook import widgets as w
from rlkit.notebook.demo import (
    NOTEBOOK_DIR,
    WIDGET_STATE,
    WIDGET_VIEW,
    ready_to_open,
    shown_widget_state,
)
from rlkit.notebook.paths import HOME_ENV, home_path
from rlkit.notebook.player import PaneFrames, Replay, checkpoint_diff, replay

MAZE = generate(4, 4, seed=11)


def _data(page: str) -> list[dict]:
    m = re.search(r"<script type='application/json' class='rlkit-data'>(.*?)</script>", page)
    assert m, "no data script"
    return json.loads(m.group(1))


def test_the_player_embeds_every_frame_and_caption_of_both_panes():
    oracle = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    rand = run_episodes(scripted_policy("random"), [MAZE], seed=3)[0]
    diff = checkpoint_diff(oracle, rand, labels=("step 60", "step <220>"))
    page = diff.to_html()
    panes = _data(page)
    assert [len(p["frames"]) for p in panes] == [len(p.frames) for p in diff.panes]
    for pane, shown in zip(panes, diff.panes, strict=True):
        assert [base64.b64decode(f) for f in pane["frames"]] == list(shown.frames)
        assert pane["info"] == list(shown.info) and pane["text"] == list(shown.text)
    n = max(len(p.frames) for p in diff.panes)
    assert f"max='{n - 1}'" in page and f"frame 1/{n}" in page
    assert "step &lt;220&gt;" in page and "<220>" not in page  # labels are escaped
    # each end frame names its own checkpoint, not the policy dir both share
    assert panes[0]["info"][-1].endswith("policy step 60")
    assert panes[1]["info"][-1].endswith("policy step <220>")
    for colour in ("rgb(255, 0, 0)", "rgb(0, 255, 0)", "rgb(40, 90, 230)", "rgb(245, 140, 20)"):
        assert colour in page  # the colour key names agent, exit, oracle and model arrows


def test_a_model_answer_cannot_end_the_players_data():
    class Sly:
        name = "sly"

        def act(self, states, messages, rngs):
            return [Response("</script><b>x</b> up") for _ in states]

    traj = run_episodes(Sly(), [MAZE])[0]
    page = replay(traj).to_html()
    assert page.count("</script>") == 1  # the data script's own end tag
    assert _data(page)[0]["text"][0] == "</script><b>x</b> up"


def test_a_replay_is_a_cells_html_output_and_starts_without_a_script_element():
    """No <script> runs in an `ipywidgets.HTML` (it sets innerHTML): the player starts from its
    first frame's onload, once whatever the number of panes."""
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    r = replay(traj)
    data, _ = DisplayFormatter().format(r)
    assert data["text/html"] == r.to_html() and "class='rlkit-player'" in data["text/html"]
    assert WIDGET_VIEW not in data
    diff = checkpoint_diff(traj, traj, ("a", "b")).to_html()
    assert diff.count("onload=") == 1 and "<script>" not in diff
    assert ipywidgets.HTML(diff).value == diff  # as the job monitor shows its rollouts
    with pytest.raises(ValueError, match="one PNG"):
        PaneFrames("a", [b"png"], ["x", "y"], ["t"], 64)
    with pytest.raises(ValueError, match="at least one pane"):
        Replay([])


def test_executed_notebooks_keep_players_and_are_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))  # a private trust db
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    shown, _ = DisplayFormatter().format(replay(traj))
    browser = w.MazeBrowser()._repr_mimebundle_()  # a widget: drawn from its saved state
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output("display_data", data=shown),
                nbformat.v4.new_output("display_data", data=browser),
            ]
        )
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    ready_to_open(path)
    opened = nbformat.read(path, as_version=4)
    first, second = opened.cells[0].outputs
    assert first.data["text/html"] == shown["text/html"] and WIDGET_VIEW in second.data
    assert NotebookNotary().check_signature(opened)  # what lets JupyterLab start the player


def saved_state(made: list) -> dict:
    """The widget state an executing kernel leaves in a notebook (nbclient's layout): every
    widget in `made` and all it holds, binary values moved to base64 buffers."""
    from ipywidgets.widgets.widget import _remove_buffers

    models, todo = {}, list(made)
    while todo:
        widget = todo.pop()
        if widget.model_id in models:
            continue
        state, paths, buffers = _remove_buffers(widget.get_state())
        models[widget.model_id] = {
            "model_name": widget._model_name,
            "model_module": widget._model_module,
            "model_module_version": widget._model_module_version,
            "state": state,
            "buffers": [
                {"data": base64.b64encode(b).decode(), "encoding": "base64", "path": p}
                for p, b in zip(paths, buffers, strict=True)
            ],
        }
        todo += [
            v
            for name in widget.keys
            for v in (lambda x: x if isinstance(x, tuple | list) else [x])(getattr(widget, name))
            if isinstance(v, ipywidgets.Widget)
        ]
    return {WIDGET_STATE: {"state": models, "version_major": 2, "version_minor": 0}}


def test_executed_notebooks_save_the_widget_state_of_what_they_show_only(tmp_path, monkeypatch):
    """A kernel saves every widget it made: players in widgets that no output shows are
    dropped; a shown widget keeps all it holds (a monitor's panel, its player included)."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    unshown = [ipywidgets.HTML(replay(traj, f"step {s}").to_html()) for s in range(3)]
    newest = ipywidgets.HTML(replay(traj, "newest").to_html())
    box = ipywidgets.VBox([ipywidgets.HTML("<b>rollouts</b>"), newest])  # a monitor's panel
    browser = w.MazeBrowser()
    made = [*unshown, box, browser]
    nb = nbformat.v4.new_notebook(metadata={"widgets": saved_state(made)})
    nb.cells.append(
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output("display_data", data=x._repr_mimebundle_())
                for x in (box, browser)
            ]
        )
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    before = path.stat().st_size
    ready_to_open(path)
    kept = set(json.loads(path.read_text())["metadata"]["widgets"][WIDGET_STATE]["state"])
    shown = saved_state([box, browser])[WIDGET_STATE]["state"]
    assert newest.model_id in kept and kept == set(shown)
    gone = saved_state(unshown)[WIDGET_STATE]["state"]
    assert not kept & set(gone)
    assert path.stat().st_size < before / 2  # three players' frames left the file
    opened = nbformat.read(path, as_version=4)
    assert shown_widget_state(opened) == (len(kept), 0)  # idempotent


def test_a_notebook_that_shows_no_widget_saves_no_widget_state():
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    made = ipywidgets.HTML(replay(traj).to_html())  # made, then never shown
    nb = nbformat.v4.new_notebook(metadata={"widgets": saved_state([made])})
    shown, _ = DisplayFormatter().format(replay(traj))
    nb.cells.append(
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", data=shown)])
    )
    assert shown_widget_state(nb) == (0, len(saved_state([made])[WIDGET_STATE]["state"]))
    assert "widgets" not in nb.metadata


def test_relative_notebook_paths_resolve_against_the_project_root(monkeypatch, tmp_path):
    monkeypatch.delenv(HOME_ENV, raising=False)
    monkeypatch.chdir(NOTEBOOK_DIR)  # where JupyterLab starts a notebook's kernel
    assert home_path("runs/demo") == NOTEBOOK_DIR.parent / "runs" / "demo"
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    assert home_path("runs/demo") == tmp_path / "runs" / "demo"
    assert home_path("/fsx/rlkit/runs") == Path("/fsx/rlkit/runs")
