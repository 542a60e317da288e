import hashlib

import numpy as np
import pytest

from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import Action
from rlkit.maze.generation import generate
from rlkit.maze.render import (
    RenderStyle,
    data_uri,
    draw_arrow,
    image_from_data_uri,
    png_bytes,
    render,
    render_array,
    to_ascii,
)
from rlkit.maze.sets import pinned_set


def _walk(maze, actions):
    s = rules.initial(maze)
    for a in actions:
        s = rules.transition(s, [a])
    return s


def test_ego_view_size_and_agent_centre():
    style = RenderStyle()  # ego, radius 2, 8 px -> 6x6 cells
    m = pinned_set()[3]
    arr = render_array(rules.initial(m), style)
    assert arr.shape == (48, 48, 3)
    # agent cell is index (2, 2) in the window: its interior pixel is the agent colour
    assert tuple(arr[2 * 8 + 4, 2 * 8 + 4]) == style.agent


def test_full_view_colours_and_walls():
    m = generate(4, 5, 1)
    style = RenderStyle(view="full", cell_px=10)
    arr = render_array(rules.initial(m), style)
    assert arr.shape == (40, 50, 3)
    assert tuple(arr[5, 5]) == style.agent  # start at (0,0)
    assert tuple(arr[35, 45]) == style.exit  # exit at (3,4)
    assert tuple(arr[0, 5]) == style.wall  # top border
    # a wall pixel appears for every set wall bit: check each cell's north edge
    for r in range(4):
        for c in range(5):
            has_n = bool(m.walls[r, c] & 1)
            assert (tuple(arr[r * 10, c * 10 + 5]) == style.wall) == has_n


def test_trail_and_last_move_drawn():
    m = generate(3, 3, 0)
    path = [a for a in Action if m.can_move(m.start, a)]
    s = _walk(m, path[:1])
    prev = m.start
    plain = render_array(s, RenderStyle(view="full"))
    assert tuple(plain[prev[0] * 8 + 4, prev[1] * 8 + 4]) == RenderStyle().trail  # default: trail
    style = RenderStyle(view="full", last=(90, 90, 90))
    arr = render_array(s, style)
    assert tuple(arr[prev[0] * 8 + 4, prev[1] * 8 + 4]) == style.last


def test_render_is_deterministic_by_image_hash():
    m = pinned_set()[7]
    s = _walk(m, [Action.UP, Action.RIGHT, Action.DOWN])
    h1 = hashlib.sha256(render(s).tobytes()).hexdigest()
    h2 = hashlib.sha256(
        render(_walk(m, [Action.UP, Action.RIGHT, Action.DOWN])).tobytes()
    ).hexdigest()
    assert h1 == h2


def test_png_and_data_uri_roundtrip():
    img = render(rules.initial(pinned_set()[0]))
    assert png_bytes(img)[:8] == b"\x89PNG\r\n\x1a\n"
    uri = data_uri(img)
    assert uri.startswith("data:image/png;base64,")
    assert np.array_equal(np.asarray(image_from_data_uri(uri)), np.asarray(img))
    with pytest.raises(UsageError):
        image_from_data_uri("http://example/x.png")


def test_ascii_marks_agent_exit_and_walls():
    m = generate(3, 4, 2)
    text = to_ascii(rules.initial(m))
    lines = text.splitlines()
    assert len(lines) == 2 * 3 + 1 and text.count("@") == 1 and text.count("E") == 1
    assert lines[0] == "+---+---+---+---+"


def test_arrow_drawn():
    m = generate(3, 3, 0)
    style = RenderStyle(view="full", cell_px=16)
    img = render(rules.initial(m), style)
    arrowed = draw_arrow(img, m.start, Action.RIGHT, style)
    assert arrowed.size == img.size and arrowed.tobytes() != img.tobytes()


@pytest.mark.parametrize(
    "kw",
    [
        {"cell_px": 1},
        {"wall_px": 0},
        {"wall_px": 4, "cell_px": 8},
        {"view": "3d"},
        {"ego_radius": 0},
    ],
)
def test_bad_style(kw):
    with pytest.raises(UsageError):
        RenderStyle(**kw)
