"""Notebook 03's plan stays a short walk (scripts/plan_walk.py, issue 53 item 6): the backend is
resolved once, the preset's settings tree walked once, and a SkyRL preset's token budget computed
once, from the env's texts (`episode_texts`) and a picture size, with no env built or drawn."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from plan_walk import walk  # noqa: E402


@pytest.mark.parametrize("preset", ["local-tiny", "qwen3vl-8b", "skyrl-tiny-cpu"])
def test_the_plan_resolves_its_backend_once_and_builds_no_env(preset):
    w = walk(preset)
    assert w.ran["backend resolution"] == 1
    assert w.ran["settings applied"] <= 1
    assert w.ran["settings-tree walk"] <= 2  # the preset's eval_set and max_turns, by name
    assert w.stays[:2] == ["notebook/workbench.py", "cluster/launch.py"]
    assert "cluster/presets.py" not in w.stays
    assert w.ran["env construction"] == 0 and w.ran["maze renderer"] == 0
    # a SkyRL preset's budget is computed once; skyrl-tiny-cpu's derived answer length reads it
    assert w.ran["token budget"] == (0 if preset == "local-tiny" else 1)
