"""What a replay shows (frames, captions, the player's panes) and the maze browser driven\nheadless: set `.value`, check what it displays (no browser, no kernel)."""

import base64
import html
import io

import numpy as np
import pytest
from PIL import Image

from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.errors import UsageError
from rlkit.maze.core import Action
from rlkit.maze.generation import generate
from rlkit.maze.parsing import format_action
from rlkit.maze.render import to_ascii
from rlkit.maze.rules import initial
from rlkit.notebook import player as p
from rlkit.notebook import widgets as w

MAZE = generate(4, 4, seed=3)


class Scripted:
    """Answers from a fixed list, then 'up' forever: an episode with known turns."""

    name = "scripted"

    def __init__(self, answers):
        self.answers = list(answers)

    def act(self, states, messages, rngs):
        text = self.answers.pop(0) if self.answers else format_action(Action.UP)
        return [Response(text) for _ in states]


@pytest.fixture(scope="module")
def solved():
    return run_episodes(scripted_policy("oracle"), [MAZE])[0]


@pytest.fixture(scope="module")
def failed():
    return run_episodes(Scripted(["I think... left?", "no idea"]), [MAZE])[0]


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def has_colour(png: bytes, rgb) -> bool:
    return bool((pixels(png) == rgb).all(axis=-1).any())


def test_replay_frames_and_captions(solved, failed):
    assert solved.solved and not failed.solved
    frames = p.replay_frames(solved)
    captions = p.replay_captions(solved)
    assert len(frames) == len(captions) == len(solved.turns) + 1
    # the oracle's arrow on every playing frame, none once the episode is over
    assert all(has_colour(f, p.ORACLE_COLOUR) for f in frames[:-1])
    assert not has_colour(frames[-1], p.ORACLE_COLOUR)
    assert len({f for f in frames}) == len(frames)  # the agent moves every turn
    assert max(pixels(frames[0]).shape[:2]) == 256 // (16 * 4) * 16 * 4  # upscaled for display
    assert captions[0].text == solved.turns[0].text
    assert "oracle:" in captions[0].info and "parsed:" in captions[0].info
    assert captions[-1].info.startswith("end | SOLVED in")
    fails = p.replay_captions(failed)
    assert fails[0].text == "I think... left?" and "parsed: left" in fails[0].info
    assert "parse error" in fails[1].info and fails[1].text == "no idea"
    assert "FAILED: truncated" in fails[-1].info and "kind" in fails[-1].info
    # the model's move (orange) differs from the oracle's here, so both arrows show
    assert has_colour(p.replay_frames(failed)[0], p.MODEL_COLOUR)


def test_a_replay_holds_each_turns_frame_answer_and_caption_on_one_slider(solved):
    r = p.replay(solved)
    (pane,) = r.panes
    page = r.to_html()
    n = len(solved.turns) + 1  # a frame per turn, then the end
    assert list(pane.frames) == p.replay_frames(solved) and f"max='{n - 1}'" in page
    assert list(pane.text) == [t.text for t in solved.turns] + [""]
    assert "turn 3/" in pane.info[2] and "SOLVED" in pane.info[-1]
    # before any script runs the page shows frame 1: its picture, caption and answer
    static = page.split("<script")[0]
    assert f"src='data:image/png;base64,{base64.b64encode(pane.frames[0]).decode()}'" in static
    assert html.escape(pane.info[0]) in static
    assert f">{html.escape(solved.turns[0].text)}</pre>" in static
    assert f"frame 1/{n}" in static


def test_checkpoint_diff_plays_both_episodes_on_the_longer_ones_slider(solved, failed):
    """The shorter episode holding its end frame is the script's: tests/test_browser.py plays it."""
    d = p.checkpoint_diff(failed, solved, labels=("step 0", "step 40"))
    long_, short = d.panes
    assert [long_.label, short.label] == ["step 0", "step 40"]
    assert len(long_.frames) > len(short.frames)
    assert f"max='{len(long_.frames) - 1}'" in d.to_html()
    assert "SOLVED" in short.info[-1] and "FAILED" in long_.info[-1]
    other = run_episodes(scripted_policy("oracle"), [generate(4, 4, seed=4)])[0]
    with pytest.raises(UsageError, match="different mazes"):
        p.checkpoint_diff(solved, other)
    with pytest.raises(UsageError, match="two names"):
        p.checkpoint_diff(solved, solved, labels=("only one",))


def test_maze_browser_follows_controls():
    mb = w.MazeBrowser(size=4, seed=1)
    maze, png, text, stats = w.maze_view(4, 1, cell_px=w.browser_cell_px(4))
    assert mb.maze == maze and mb.image.value == png and "4x4 wilson seed 1" in mb.stats.value
    # drawn at its display size (~480 px), shown pixel for pixel; every toggle group labelled
    width = Image.open(io.BytesIO(png)).size[0]
    assert 400 <= width <= 520 and mb.image.layout.width == f"{width}px"
    assert [mb.algorithm.description, mb.placement.description, mb.view.description] == [
        "generator",
        "start/exit",
        "view",
    ]
    assert to_ascii(initial(maze)).splitlines()[1] in mb.ascii.value
    mb.size.value = 6
    assert mb.maze.height == 6 and "6x6" in mb.stats.value
    mb.algorithm.value = "dfs"
    assert mb.maze == generate(6, 6, 1, algorithm="dfs") and "dfs" in mb.stats.value
    assert mb.ascii.layout.display == "none" and mb.image.layout.display is None
    mb.view.value = "ASCII"
    assert mb.image.layout.display == "none" and mb.ascii.layout.display is None
    assert text != to_ascii(initial(mb.maze))


def test_captions_name_the_oracles_move_up_too():
    """Action.UP is 0: the caption once read it as 'no move' and printed 'oracle: -'."""
    trajs = run_episodes(scripted_policy("oracle"), [generate(5, 5, seed=s) for s in range(8)])
    infos = [c.info for t in trajs for c in p.replay_captions(t)[:-1]]
    assert any("parsed: up" in i for i in infos)
    for info in infos:  # the oracle policy plays the oracle's move at every turn
        parsed = info.split("parsed: ")[1].split(" |")[0]
        assert f"oracle: {parsed} |" in info, info
