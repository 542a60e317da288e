"""`rlkit.train.rescore`: captured episodes re-scored under two checkpoints (the learning check
SkyRL's CPU run is held to, tests/skyrl/test_skyrl_cpu_run.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from rlkit.env.maze_env import env_for_set
from rlkit.episodes.policies import OraclePolicy
from rlkit.episodes.rollout import run_episodes, turn_prompts
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_set
from rlkit.model.batching import build_batch, response_logprobs
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.run.captures import CapturedEpisode
from rlkit.train.rescore import EpisodeShift, Rescore, episodes_logprobs, rescore


def shifts(rows: list[tuple[int, float, bool, float, float]]) -> Rescore:
    return Rescore([EpisodeShift((1, g), a, s, d, o) for g, a, s, d, o in rows])


def test_the_statistics_read_groups_as_the_unit():
    check = shifts(
        [
            (0, 1.0, True, 0.2, 0.0),
            (0, -1.0, False, -0.1, 0.0),
            (1, 1.0, True, 0.3, 0.01),
            (1, -1.0, False, -0.2, 0.01),
            (2, 1.0, True, 0.1, 0.0),
            (2, -1.0, False, 0.0, 0.0),
        ]
    )
    assert check.weighted == pytest.approx((0.3 + 0.5 + 0.1) / 6)
    sums = [0.3, 0.5, 0.1]  # advantage x shift per group
    sd = math.sqrt(sum((s - 0.3) ** 2 for s in sums) / 2)
    assert check.z == pytest.approx(0.3 / (sd / math.sqrt(3)))
    assert check.solved_gain == pytest.approx((0.3 + 0.5 + 0.1) / 3)
    assert check.observation_weighted == pytest.approx(0.0)
    assert check.learned
    flipped = Rescore([replace(e, advantage=-e.advantage) for e in check.episodes])
    assert flipped.weighted < 0 and flipped.z < 0 and not flipped.learned


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """The tiny model and two oracle episodes of the `test` set, captured with advantages."""
    loaded = load(build_tiny(tmp_path_factory.mktemp("rescore") / "tiny", seed=0))
    env = env_for_set("test")
    trajs = run_episodes(OraclePolicy(), pinned_set("test")[:2], env)
    eps = [
        CapturedEpisode(1, i, a, t) for i, (t, a) in enumerate(zip(trajs, (1.0, -1.0), strict=True))
    ]
    return loaded, env, eps


def test_one_forward_scores_every_answer_and_observation_token(played):
    loaded, env, eps = played
    answers, observed = episodes_logprobs(loaded, eps[:1], env)[0]
    tok = loaded.tokenizer
    n_answer = sum(
        len(tok.encode(t.text, add_special_tokens=False)) for t in eps[0].trajectory.turns
    )
    assert answers.numel() == n_answer and bool((answers <= 0).all())
    # the last answer's tokens read where the trainer's own response scoring reads them
    traj = eps[0].trajectory
    prompt = loaded.encoder.encode(turn_prompts(traj, env, history=None)[-1])
    final = tok.encode(traj.turns[-1].text, add_special_tokens=False)
    with torch.no_grad():
        direct, _ = response_logprobs(
            loaded, build_batch(loaded, [prompt], [final]), mask_vision=False
        )
    assert torch.allclose(answers[-len(final) :], direct[0, : len(final)], atol=1e-5)
    assert observed.numel() > 0 and bool(torch.isfinite(observed).all())
    same = rescore(eps, before=loaded, after=loaded, env=env)
    assert all(e.shift == 0.0 and e.observation_shift == 0.0 for e in same.episodes)


def test_episodes_scored_in_one_padded_forward_score_as_each_alone(played):
    loaded, env, eps = played
    together = episodes_logprobs(loaded, eps, env)
    alone = [episodes_logprobs(loaded, [e], env)[0] for e in eps]
    assert len({len(e.trajectory.turns) for e in eps}) == 2  # rows of two lengths: one padded
    for (answers, observed), (answers1, observed1) in zip(together, alone, strict=True):
        assert answers.shape == answers1.shape and observed.shape == observed1.shape
        assert torch.allclose(answers, answers1, atol=1e-5)
        assert torch.allclose(observed, observed1, atol=1e-5)


def test_episodes_that_trained_nothing_are_refused(played):
    loaded, env, eps = played
    idle = [CapturedEpisode(1, 0, 0.0, e.trajectory) for e in eps]
    with pytest.raises(UsageError, match="nonzero advantage"):
        rescore(idle, before=loaded, after=loaded, env=env)
