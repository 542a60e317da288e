"""The GRPO update learns, checked where no CPU's float kernels can flip the verdict.

Eps-oracles play a fixed batch (pure Python: the same episodes on every machine); the real
`score`, `turn_samples` and `update` train a seeded tiny model on it (`rlkit.train.update_check`),
under the embedded default's recipe and the cluster's (the same switches SkyRL runs; its loss
math is checked against SkyRL's own in tests/skyrl/test_objective.py).
The margins are sized across seeds standing in for machines, and the check fails on each of
four deliberate bugs (`benchmarks/bench_update_check.py` re-measures both; docs/tests.md has
the table). Whether whole runs learn is the benchmarks' question (`bench_learning.py`, several
seeds) and `make demo`'s printed paired test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.policies import EpsOraclePolicy, OraclePolicy
from rlkit.episodes.rollout import run_episodes, turn_prompts
from rlkit.maze.sets import pinned_spec, train_mazes
from rlkit.model.batching import AnswerSpec, choice_logits
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.run.captures import CapturedEpisode
from rlkit.train.presets import preset
from rlkit.train.rescore import EpisodeShift, Rescore, rescore
from rlkit.train.update_check import (
    ScriptedAnswers,
    UpdateCheck,
    _turns_rescored,
    check_update,
)

RECIPES = {
    "local-tiny": preset("local-tiny").recipe,  # the embedded default's
    "qwen3vl-8b": get_preset("qwen3vl-8b").recipe,  # the cluster's: SkyRL's defaults, its KL
}


@pytest.mark.slow  # ~30 s alone each: 20 updates on ~900 turns, then 20 KL-only ones
@pytest.mark.parametrize("name", RECIPES)
def test_the_update_moves_the_policy_the_way_grpo_asks(name, tmp_path):
    check = check_update(RECIPES[name], seed=0, workdir=tmp_path)
    assert not check.failures(), check.summary()


def test_scripted_answers_carry_the_models_tokens_and_logprobs(tmp_path):
    loaded = load(build_tiny(tmp_path / "m", seed=0))
    mazes = train_mazes(pinned_spec("test"), 0, 2)
    trajs = run_episodes(ScriptedAnswers(loaded, OraclePolicy()), mazes, EnvConfig(), samples=2)
    spec = AnswerSpec.from_loaded(loaded)
    assert all(t.solved for t in trajs)  # the oracle's moves, whatever the model prefers
    turn = trajs[0].turns[0]
    assert turn.response_ids[: spec.choice_pos] == list(spec.prefix)
    k = spec.choices.index(turn.response_ids[spec.choice_pos])
    assert turn.response_ids == spec.response(k)
    enc = loaded.encoder.encode(turn_prompts(trajs[0], EnvConfig())[0])
    assert list(enc.prompt_ids) == list(turn.prompt_ids)
    with torch.no_grad():
        want = torch.log_softmax(choice_logits(loaded, [enc], spec)[0].float(), -1)[k]
    assert turn.logprobs[spec.choice_pos] == pytest.approx(float(want), abs=1e-5)
    assert np.count_nonzero(turn.logprobs) == 1  # forced tokens carry no choice


def _check(**kw) -> UpdateCheck:
    base = {
        "greedy_before": 0.3,
        "greedy_after": 0.5,
        "solved_before": 0.0,
        "solved_after": 0.2,
        "kl_before": 1.0,
        "kl_after": 0.01,
    }
    shift = kw.pop("shift", (0.5, 0.01))
    won, obs = shift
    episodes = [
        EpisodeShift((0, 0), +0.5, True, won / 2, obs),
        EpisodeShift((0, 0), -0.5, False, -won / 2, -obs),
    ]
    return UpdateCheck(Rescore(episodes), Rescore(episodes), **{**base, **kw})


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({}, None),
        ({"shift": (-0.3, 0.0)}, "solved answers gained -0.3000"),
        ({"shift": (0.0, 0.0)}, "solved answers gained +0.0000"),
        ({"shift": (0.5, 0.4)}, "observations moved"),
        ({"greedy_after": 0.3}, "greedy moves agreed"),
        ({"kl_after": 1.2}, "the KL term took the KL"),
    ],
)
def test_each_way_an_update_goes_wrong_is_named(changes, says):
    failures = _check(**changes).failures()
    if says is None:
        assert failures == []
    else:
        assert any(says in f for f in failures), failures


def test_under_gigpo_the_trained_rescoring_weights_each_turn_by_its_own(tmp_path):
    before, after = (load(build_tiny(tmp_path / n, seed=s)) for n, s in (("a", 0), ("b", 1)))
    mazes, env = train_mazes(pinned_spec("test"), 0, 2), EnvConfig()
    trajs = run_episodes(ScriptedAnswers(before, EpsOraclePolicy(0.5)), mazes, env, samples=2)
    weights = [[(i + 1) * (-1) ** k for k in range(len(t.turns))] for i, t in enumerate(trajs)]
    weights[0] = [0.0] * len(trajs[0].turns)  # an episode the loss dropped
    got = _turns_rescored(trajs, weights, before, after, env)
    assert [e.advantage for e in got.episodes] == [a for w in weights[1:] for a in w]
    # each turn's answer shift, weighted by its tokens, is its episode's shift
    plain = rescore(
        [CapturedEpisode(0, 0, 1.0, t) for t in trajs[1:]], before=before, after=after, env=env
    )
    it = iter(got.episodes)
    for t, whole in zip(trajs[1:], plain.episodes, strict=True):
        sizes = [len(before.tokenizer.encode(u.text, add_special_tokens=False)) for u in t.turns]
        turns = [next(it) for _ in t.turns]
        mean = sum(n * e.shift for n, e in zip(sizes, turns, strict=True)) / sum(sizes)
        assert mean == pytest.approx(whole.shift, abs=1e-5)
        obs = [e.observation_shift for e in turns]
        assert obs == pytest.approx([whole.observation_shift] * len(turns))
