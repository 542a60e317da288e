"""The model policy through the real rollout path: answers, determinism, logprob consistency."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.policies import EpsOraclePolicy, RandomPolicy
from rlkit.episodes.rollout import episode_rngs, history_window, play_episode, run_episodes
from rlkit.errors import UsageError
from rlkit.maze.parsing import parse_actions
from rlkit.maze.sets import pinned_set
from rlkit.model.batching import build_batch, forward_hidden, response_logprobs, turn_logprobs
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy, load_policy

SHORT = EnvConfig(max_turns=4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="module")
def loaded(tiny):
    # one thread: these batches are tiny, and spinning OpenMP threads stall on a shared machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load(tiny)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def mazes():
    return pinned_set()[:6]


def _signature(trajs):
    return [
        (t.maze_index, t.sample, t.reward, [(u.text, u.response_ids, u.logprobs) for u in t.turns])
        for t in trajs
    ]


def test_constrained_answers_parse_strictly(loaded, mazes):
    pol = ModelPolicy(loaded)
    trajs = run_episodes(pol, mazes, SHORT, seed=0)
    turns = [u for t in trajs for u in t.turns]
    assert len(turns) >= len(trajs)
    for u in turns:
        moves, err = parse_actions(u.text, "strict")
        assert err is None and len(moves) == 1
        assert len(u.response_ids) == 4 and u.response_ids[-1] == loaded.eos_id
        assert u.logprobs[0] == u.logprobs[2] == u.logprobs[3] == 0.0  # forced tokens
        assert -np.log(4) * 3 < u.logprobs[1] < 0.0
        assert u.prompt_ids[-3:] == loaded.tokenizer("<|im_start|>assistant\n")["input_ids"]


def test_free_generation_parse_errors_become_feedback(loaded, mazes):
    pol = ModelPolicy(loaded, constrained=False, max_new_tokens=6)
    trajs = run_episodes(pol, mazes[:3], EnvConfig(max_turns=2), seed=0, history=None)
    turns = [u for t in trajs for u in t.turns]
    assert all(len(t.turns) == 2 and t.truncated for t in trajs if not t.terminated)
    assert any(u.parse_error for u in turns), "a random model should write unparseable text"
    for u in turns:
        assert (u.parse_error is None) == bool(u.actions)
        assert 1 <= len(u.response_ids) <= 6 and len(u.logprobs) == len(u.response_ids)
    # the feedback reached the next prompt: it is longer than the first (history=None)
    first, second = trajs[0].turns[0].prompt_ids, trajs[0].turns[1].prompt_ids
    assert len(second) > len(first) and second[: len(first)] == first


def test_rollouts_are_deterministic_and_batch_independent(loaded, mazes):
    pol = ModelPolicy(loaded)
    a = run_episodes(pol, mazes, SHORT, seed=7)
    b = run_episodes(pol, mazes, SHORT, seed=7)
    c = run_episodes(pol, mazes, SHORT, seed=8)
    assert _signature(a) == _signature(b)
    assert [u.text for t in a for u in t.turns] != [u.text for t in c for u in t.turns]
    # episode j played alone, with its own stream, answers as it did inside the batch
    rngs = episode_rngs(7, len(a))
    for j in (0, 4):
        alone = play_episode(pol, mazes[a[j].maze_index], SHORT, rng=rngs[j])
        assert [u.text for u in alone.turns] == [u.text for u in a[j].turns]
        got = [u.logprobs[1] for u in alone.turns]
        assert np.allclose(got, [u.logprobs[1] for u in a[j].turns], atol=1e-5)


def test_greedy_ignores_the_seed(loaded, mazes):
    pol = ModelPolicy(loaded, greedy=True)
    texts = [
        [u.text for t in run_episodes(pol, mazes[:3], SHORT, seed=s) for u in t.turns]
        for s in (1, 2)
    ]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("constrained", [True, False], ids=["constrained", "free"])
def test_sampled_logprobs_equal_training_forward(loaded, mazes, constrained):
    pol = ModelPolicy(loaded, constrained=constrained, max_new_tokens=5, temperature=0.7)
    trajs = run_episodes(pol, mazes[:4], EnvConfig(max_turns=2), seed=3, history=1)
    # rebuild the exact prompts the policy saw, from the conversation the env replays
    prompts, responses, recorded = [], [], []
    for t in trajs:
        pol_msgs = _replayed_prompts(t)
        for u, msgs in zip(t.turns, pol_msgs, strict=True):
            enc = loaded.encoder.encode(msgs)
            assert enc.prompt_ids == u.prompt_ids
            prompts.append(enc)
            responses.append(u.response_ids)
            recorded.append(u.logprobs)
    batch = build_batch(loaded, prompts, responses)
    with torch.no_grad():
        logp, entropy = response_logprobs(loaded, batch, temperature=0.7, answer=pol.answer)
    for b, rec in enumerate(recorded):
        assert np.allclose(logp[b, : len(rec)].numpy(), rec, atol=1e-5, rtol=0)
        assert bool((logp[b, len(rec) :] == 0).all())
    assert bool((entropy >= 0).all())
    if constrained:
        assert float(entropy[:, 1].min()) > 0 and float(entropy[:, [0, 2, 3]].abs().max()) == 0


@pytest.mark.parametrize("constrained", [True, False], ids=["constrained", "free"])
def test_turn_logprobs_run_each_distinct_forward_once_with_equal_values_and_gradients(
    loaded, mazes, constrained
):
    from rlkit.model.batching import distinct, prompt_key

    pol = ModelPolicy(loaded, constrained=constrained, max_new_tokens=4)
    trajs = run_episodes(pol, mazes[:3], EnvConfig(max_turns=2), samples=4, seed=5, history=1)
    prompts, responses = [], []
    for t in trajs:
        for u, msgs in zip(t.turns, _replayed_prompts(t), strict=True):
            prompts.append(loaded.encoder.encode(msgs))
            responses.append(u.response_ids)
    prompts.append(prompts[0])  # a row equal in prompt and reply: shared in both modes
    responses.append(responses[0])
    first, index = distinct([prompt_key(p) for p in prompts])
    assert len(first) <= len(prompts) - 9, "the 4 episodes of each maze share their first prompt"
    assert [prompts[first[i]].prompt_ids for i in index] == [p.prompt_ids for p in prompts]
    weights = torch.randn(len(prompts), generator=torch.Generator().manual_seed(0))
    values, grads = [], []
    for shared in (True, False):
        if shared:
            logp, entropy, mask = turn_logprobs(loaded, prompts, responses, answer=pol.answer)
        else:
            batch = build_batch(loaded, prompts, responses)
            logp, entropy = response_logprobs(loaded, batch, answer=pol.answer)
            mask = batch.response_mask
        (logp.sum(1) * weights).sum().backward()
        values.append((logp.detach(), entropy.detach(), mask))
        grads.append([p.grad.clone() for p in loaded.model.parameters() if p.grad is not None])
        loaded.model.zero_grad(set_to_none=True)
    for a, b in zip(*values, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    if constrained:  # the shared forward assumes the forced prefix: anything else is refused
        bad = [responses[0][-1], *responses[0][1:]]
        with pytest.raises(UsageError, match="forced answer prefix"):
            turn_logprobs(loaded, prompts[:1], [bad], answer=pol.answer)


def _replayed_prompts(traj) -> list[list[dict]]:
    """The windowed messages of each turn, rebuilt by stepping a fresh env with the answers."""
    from rlkit.env.maze_env import make_env

    env = make_env(traj.maze_obj, EnvConfig(max_turns=2))
    conv, _ = env.init()
    out = []
    for u in traj.turns:
        out.append(history_window(conv, 1))
        step = env.step(u.text)
        conv = [*conv, {"role": "assistant", "content": u.text}, *step["observations"]]
    return out


def test_training_forward_has_gradients(loaded, mazes):
    pol = ModelPolicy(loaded)
    trajs = run_episodes(pol, mazes[:2], EnvConfig(max_turns=1), seed=0)
    msgs = [_replayed_prompts(t)[0] for t in trajs]
    batch = build_batch(
        loaded, [loaded.encoder.encode(m) for m in msgs], [t.turns[0].response_ids for t in trajs]
    )
    logp, _ = response_logprobs(loaded, batch, answer=pol.answer)
    logp.sum().backward()
    grads = [p.grad for p in loaded.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    loaded.model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("history", [None, 2], ids=["full", "last-2"])
def test_history_modes(loaded, mazes, history):
    pol = ModelPolicy(loaded)
    trajs = run_episodes(pol, mazes[:2], EnvConfig(max_turns=4), seed=0, history=history)
    image_id = loaded.model.config.image_token_id
    vision_start = loaded.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    for t in trajs:
        n_images = [u.prompt_ids.count(vision_start) for u in t.turns]
        assert all(
            u.prompt_ids.count(image_id) == 9 * n for u, n in zip(t.turns, n_images, strict=True)
        )
        expected = [k + 1 if history is None else min(k + 1, history) for k in range(len(t.turns))]
        assert n_images == expected


def test_load_policy(tiny):
    assert isinstance(load_policy("random"), RandomPolicy)
    assert isinstance(load_policy("eps-oracle:0.25"), EpsOraclePolicy)
    pol = load_policy(tiny, greedy=True, constrained=False)
    assert isinstance(pol, ModelPolicy) and pol.greedy and pol.answer is None
    with pytest.raises(UsageError, match="unknown policy"):
        load_policy("/no/such/dir")
    with pytest.raises(UsageError, match="takes no options"):
        load_policy("oracle", temperature=0.5)
    with pytest.raises(UsageError, match="temperature"):
        load_policy(tiny, temperature=0.0)


def test_distinct_image_encoding_matches_plain_forward(loaded, mazes):
    from rlkit.env.maze_env import make_env

    msgs = [make_env(m).init()[0] for m in mazes[:3]] * 2  # each picture twice
    msgs[1] = [*msgs[1], {"role": "assistant", "content": "x"}, msgs[1][-1]]  # a longer prompt
    responses = [[40, 41], [], [42], [43, 44, 45], [46], [47]]  # plain text tokens
    batch = build_batch(loaded, [loaded.encoder.encode(m) for m in msgs], responses)
    assert len(batch.image_index) == 7 and batch.unique_grid_thw.shape[0] == 3
    # cached per-prompt rope positions == the model's own computation on the padded batch
    expected, _ = loaded.model.model.get_rope_index(
        batch.input_ids,
        batch.mm_token_type_ids,
        image_grid_thw=batch.image_grid_thw,
        attention_mask=batch.attention_mask,
    )
    assert torch.equal(batch.position_ids, expected)
    with torch.no_grad():
        fast = forward_hidden(loaded, batch)
        plain = loaded.model.model(**batch.model_inputs()).last_hidden_state
    assert torch.allclose(fast, plain, atol=1e-5, rtol=0)
