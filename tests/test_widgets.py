"""Widgets driven headless: set `.value`, check what they display (no browser, no kernel)."""

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


def test_replay_widget_follows_slider_and_play(solved):
    rw = w.ReplayWidget(solved)
    assert rw.slider.max == len(solved.turns) == rw.play.max
    assert rw.image.value == rw.frames[0] and rw.text.value == solved.turns[0].text
    rw.slider.value = 2
    assert rw.image.value == rw.frames[2] and rw.text.value == solved.turns[2].text
    assert "turn 3/" in rw.info.value
    rw.play.value = 1  # what a Play tick does; jslink would do it in a browser
    assert rw.slider.value == 1 and rw.image.value == rw.frames[1]
    rw.slider.value = rw.slider.max
    assert "SOLVED" in rw.info.value and rw.text.value == ""


def test_checkpoint_diff_holds_last_frame_of_shorter_episode(solved, failed):
    dw = w.CheckpointDiffWidget(failed, solved, labels=("step 0", "step 40"))
    short, long_ = dw.panes[1], dw.panes[0]
    assert dw.slider.max == long_.n_frames - 1 > short.n_frames - 1
    dw.slider.value = 1
    assert short.image.value == short.frames[1] and long_.image.value == long_.frames[1]
    dw.slider.value = dw.slider.max
    assert short.image.value == short.frames[-1] and "SOLVED" in short.info.value
    assert long_.image.value == long_.frames[-1] and "FAILED" in long_.info.value
    other = run_episodes(scripted_policy("oracle"), [generate(4, 4, seed=4)])[0]
    with pytest.raises(UsageError, match="different mazes"):
        w.CheckpointDiffWidget(solved, other)
    with pytest.raises(UsageError, match="two names"):
        w.CheckpointDiffWidget(solved, solved, labels=("only one",))


def test_maze_browser_follows_controls():
    mb = w.maze_browser(size=4, seed=1)
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
