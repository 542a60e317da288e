"""vLLM's move probabilities (constrained answers: the top-4 processed logprobs of the one
choice token) against the HF engine's, on the tiny model with vLLM's CPU build; free answers
record none. One in-process engine, about a minute on a quiet 2-core machine."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow  # a vLLM engine

from rlkit.env.maze_env import env_for_set  # noqa: E402
from rlkit.episodes.rollout import run_episodes  # noqa: E402
from rlkit.maze.core import Action  # noqa: E402
from rlkit.maze.sets import pinned_set  # noqa: E402
from rlkit.model.build import build_tiny  # noqa: E402
from rlkit.model.load import load  # noqa: E402
from rlkit.model.policy import ModelPolicy  # noqa: E402
from rlkit.model.vllm_engine import engine_limits, start_engine  # noqa: E402
from rlkit.model.vllm_policy import VllmPolicy  # noqa: E402

SET = "test"
TOL = 1e-4
"""float32 on both engines (their logprobs agree to ~1.5e-6)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="module")
def engine(tiny):
    return start_engine(tiny, **engine_limits(SET, history=1), kv_cache_gb=0.25)


def test_vllm_records_the_same_move_probabilities_as_the_hf_engine(engine, tiny):
    mazes, cfg = pinned_set(SET)[:6], env_for_set(SET)
    v = run_episodes(VllmPolicy(engine, greedy=True), mazes, cfg, seed=1)
    h = run_episodes(ModelPolicy(load(tiny), greedy=True), mazes, cfg, seed=1)
    for a, b in zip(v, h, strict=True):
        assert [u.actions for u in a.turns] == [u.actions for u in b.turns]
        for u, w in zip(a.turns, b.turns, strict=True):
            assert sum(u.move_probs) == pytest.approx(1.0, abs=1e-6)
            assert u.move_probs == pytest.approx(w.move_probs, abs=TOL)
    # sampled: P(chosen move) is the recorded choice-token logprob, at the sampling temperature
    pol = VllmPolicy(engine, temperature=0.7)
    for traj in run_episodes(pol, mazes, cfg, seed=2):
        for u in traj.turns:
            p = u.move_probs[Action[u.actions[0].upper()]]
            assert math.log(p) == pytest.approx(u.logprobs[pol.answer.choice_pos], abs=TOL)
    free = VllmPolicy(engine, constrained=False, max_new_tokens=4)
    assert all(
        u.move_probs is None for t in run_episodes(free, mazes[:2], cfg, seed=3) for u in t.turns
    )
