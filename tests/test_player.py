"""The kernel-free replay player, what executed notebooks keep of a replay, and notebook paths."""

import base64
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.sign import NotebookNotary

from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.maze.generation import generate
from rlkit.notebook import widgets as w
from rlkit.notebook.demo import (
    NOTEBOOK_DIR,
    WIDGET_STATE,
    WIDGET_VIEW,
    kernel_free_outputs,
    ready_to_open,
    shown_widget_state,
)
from rlkit.notebook.paths import HOME_ENV, home_path
from rlkit.notebook.player import PaneFrames, player_html

MAZE = generate(4, 4, seed=11)


def _data(page: str) -> list[dict]:
    m = re.search(r"<script type='application/json' class='rlkit-data'>(.*?)</script>", page)
    assert m, "no data script"
    return json.loads(m.group(1))


def test_the_player_embeds_every_frame_and_caption_of_both_panes():
    oracle = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    rand = run_episodes(scripted_policy("random"), [MAZE], seed=3)[0]
    diff = w.CheckpointDiffWidget(oracle, rand, labels=("step 60", "step <220>"))
    page = diff.to_html()
    panes = _data(page)
    assert [len(p["frames"]) for p in panes] == [p.n_frames for p in diff.panes]
    for pane, widget_pane in zip(panes, diff.panes, strict=True):
        assert [base64.b64decode(f) for f in pane["frames"]] == widget_pane.frames
        assert pane["info"] == [c.info for c in widget_pane.captions]
    n = max(p.n_frames for p in diff.panes)
    assert f"max='{n - 1}'" in page and f"frame 1/{n}" in page
    assert "step &lt;220&gt;" in page and "<220>" not in page  # labels are escaped
    # each end frame names its own checkpoint, not the policy dir both share
    assert panes[0]["info"][-1].endswith("policy step 60")
    assert panes[1]["info"][-1].endswith("policy step <220>")
    for colour in ("rgb(255, 0, 0)", "rgb(0, 255, 0)", "rgb(40, 90, 230)", "rgb(245, 140, 20)"):
        assert colour in page  # the colour key names agent, exit, oracle and model arrows


def test_a_model_answer_cannot_end_the_players_script():
    class Sly:
        name = "sly"

        def act(self, states, messages, rngs):
            return [Response("</script><b>x</b> up") for _ in states]

    traj = run_episodes(Sly(), [MAZE])[0]
    page = w.ReplayWidget(traj).to_html()
    assert page.count("</script>") == 2  # the data script's and the player's own end tags
    assert _data(page)[0]["text"][0] == "</script><b>x</b> up"


def test_replay_widgets_display_as_widget_and_player():
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    bundle = w.ReplayWidget(traj)._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and "class='rlkit-player'" in bundle["text/html"]
    with pytest.raises(ValueError, match="one PNG"):
        PaneFrames("a", [b"png"], ["x", "y"], ["t"], 64)
    with pytest.raises(ValueError, match="at least one pane"):
        player_html([])


def test_executed_notebooks_keep_players_and_are_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))  # a private trust db
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    replay = w.ReplayWidget(traj)._repr_mimebundle_()
    browser = w.MazeBrowser()._repr_mimebundle_()  # no HTML form: stays a widget
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output("display_data", data=replay),
                nbformat.v4.new_output("display_data", data=browser),
            ]
        )
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    ready_to_open(path)
    opened = nbformat.read(path, as_version=4)
    first, second = opened.cells[0].outputs
    assert WIDGET_VIEW not in first.data and "rlkit-player" in first.data["text/html"]
    assert WIDGET_VIEW in second.data
    assert NotebookNotary().check_signature(opened)
    assert kernel_free_outputs(opened) == 0  # idempotent


def saved_state(made: list) -> dict:
    """The widget state an executing kernel leaves in a notebook (nbclient's layout): every
    widget in `made` and all it holds, binary values moved to base64 buffers."""
    import ipywidgets
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
    """A kernel saves every widget it made: the replays a job monitor replaced, and replays
    whose output is now their HTML player, are dropped; a shown widget keeps all it holds,
    the jslink between its Play and slider included."""
    import ipywidgets
    from ipywidgets.widgets.widget_link import Link

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    replaced = [w.ReplayWidget(traj, label=f"step {s}") for s in range(3)]  # never shown now
    as_player = w.ReplayWidget(traj)  # shown, as its kernel-free player
    newest = w.ReplayWidget(traj, label="newest")
    box = ipywidgets.VBox([newest])  # a monitor's panel
    browser = w.MazeBrowser()
    links = [
        x
        for x in ipywidgets.Widget.widgets.values()
        if isinstance(x, Link) and x.source[0] is newest.play
    ]
    made = [*replaced, as_player, box, browser, *links]
    nb = nbformat.v4.new_notebook(metadata={"widgets": saved_state(made)})
    nb.cells.append(
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output("display_data", data=x._repr_mimebundle_())
                for x in (as_player, box, browser)
            ]
        )
    )
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    before = path.stat().st_size
    ready_to_open(path)
    kept = set(json.loads(path.read_text())["metadata"]["widgets"][WIDGET_STATE]["state"])
    shown = saved_state([box, browser, *links])[WIDGET_STATE]["state"]
    assert links and kept == set(shown)  # the newest replay's Play-slider link is kept
    gone = saved_state([*replaced, as_player])[WIDGET_STATE]["state"]
    assert not kept & set(gone)
    assert path.stat().st_size < before / 2  # four replays' frames left the file
    opened = nbformat.read(path, as_version=4)
    assert shown_widget_state(opened) == (len(kept), 0)  # idempotent


def test_a_notebook_whose_widgets_all_became_players_saves_no_widget_state():
    traj = run_episodes(scripted_policy("oracle"), [MAZE])[0]
    replay = w.ReplayWidget(traj)
    nb = nbformat.v4.new_notebook(metadata={"widgets": saved_state([replay])})
    out = nbformat.v4.new_output("display_data", data=replay._repr_mimebundle_())
    nb.cells.append(nbformat.v4.new_code_cell(outputs=[out]))
    kernel_free_outputs(nb)
    assert shown_widget_state(nb) == (0, len(saved_state([replay])[WIDGET_STATE]["state"]))
    assert "widgets" not in nb.metadata


def test_relative_notebook_paths_resolve_against_the_project_root(monkeypatch, tmp_path):
    monkeypatch.delenv(HOME_ENV, raising=False)
    monkeypatch.chdir(NOTEBOOK_DIR)  # where JupyterLab starts a notebook's kernel
    assert home_path("runs/demo") == NOTEBOOK_DIR.parent / "runs" / "demo"
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    assert home_path("runs/demo") == tmp_path / "runs" / "demo"
    assert home_path("/fsx/rlkit/runs") == Path("/fsx/rlkit/runs")
