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
from rlkit.notebook.demo import NOTEBOOK_DIR, ready_to_open
from rlkit.notebook.paths import HOME_ENV, home_path
from rlkit.notebook.player import WIDGET_VIEW, PaneFrames, kernel_free_outputs, player_html

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


def test_relative_notebook_paths_resolve_against_the_project_root(monkeypatch, tmp_path):
    monkeypatch.delenv(HOME_ENV, raising=False)
    monkeypatch.chdir(NOTEBOOK_DIR)  # where JupyterLab starts a notebook's kernel
    assert home_path("runs/demo") == NOTEBOOK_DIR.parent / "runs" / "demo"
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    assert home_path("runs/demo") == tmp_path / "runs" / "demo"
    assert home_path("/fsx/rlkit/runs") == Path("/fsx/rlkit/runs")
