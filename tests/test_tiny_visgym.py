"""The seed's task for the tiny model (`local-tiny-visgym`): VisGym's picture drawn with a one-
square wall pad so that every 16 px vision patch holds one cell and its passages."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.render import RenderStyle, render_array
from rlkit.maze.sets import pinned_set


def test_a_padded_picture_is_visgyms_with_a_wall_border_right_and_below():
    style = replace(env_for_set("visgym-easy").style, cell_px=8)
    state = rules.initial(pinned_set("visgym-easy")[0])
    plain = render_array(state, style)
    padded = render_array(state, replace(style, pad=1))
    assert plain.shape == (72, 72, 3) and padded.shape == (80, 80, 3)
    assert np.array_equal(padded[:72, :72], plain)
    border = np.concatenate([padded[72:].reshape(-1, 3), padded[:, 72:].reshape(-1, 3)])
    assert (border == np.array(style.wall, np.uint8)).all()
    with pytest.raises(UsageError, match=r"pad \(9\) must be 0..4"):
        RenderStyle(pad=9)
