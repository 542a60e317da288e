"""Notebook 03's plan stays a short walk (scripts/plan_walk.py, issue 53 item 6): the backend is
resolved once, the preset's settings tree walked once, and the budget sizes its picture without
the renderer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from plan_walk import walk  # noqa: E402


@pytest.mark.parametrize("preset", ["local-tiny", "qwen3vl-8b"])
def test_the_plan_resolves_its_backend_once_and_sizes_no_picture_by_drawing(preset):
    w = walk(preset)
    assert w.ran["backend resolution"] == 1
    assert w.ran["settings applied"] <= 1
    assert w.ran["settings-tree walk"] <= 2  # the preset's eval_set and max_turns, by name
    assert w.stays[:2] == ["notebook/workbench.py", "cluster/launch.py"]
    assert "cluster/presets.py" not in w.stays
    assert w.ran["maze renderer"] <= 2  # the env's own two observations, not the budget's size
    assert w.ran["env construction"] <= 1
