"""The GRPO step's free functions (rlkit.train.step), without a Trainer.

Bookkeeping against hand-computed values; turn samples and the update on the real tiny model.
"""

import copy
from dataclasses import replace

import pytest
import torch

from rlkit.episodes.rollout import Trajectory, Turn, run_episodes
from rlkit.errors import UsageError
from rlkit.maze.sets import train_mazes
from rlkit.model.batching import AnswerSpec
from rlkit.model.build import build_tiny
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy
from rlkit.train import step as st
from rlkit.train.config import LOCAL_TINY_RECIPE, GRPOConfig, ScheduleConfig
from rlkit.train.learner import Learner, TurnSample, minibatch_loss, with_reference
from rlkit.train.presets import preset
from rlkit.train.state import TrainState, due, rollout_seed, seed_for, shuffle_seed
from rlkit.train.step import grouped_minibatches, minibatch_order, update


def _traj(maze_index: int, reward: float, turns: int = 1) -> Trajectory:
    turn = Turn(text="", actions=[], parse_error=None, pos_before=(0, 0), pos_after=(0, 0))
    return Trajectory(
        maze={},
        maze_index=maze_index,
        sample=0,
        turns=[turn] * turns,
        reward=reward,
        terminated=reward > 0,
    )


@pytest.fixture(scope="module")
def smoke():
    return preset("smoke")


@pytest.fixture(scope="module")
def learner(tmp_path_factory, smoke):
    path = build_tiny(tmp_path_factory.mktemp("tiny"), seed=0, config=smoke.model.tiny)
    loaded = load(path)
    opt = torch.optim.AdamW(loaded.model.parameters(), lr=1e-4)
    return Learner(loaded, opt, answer=AnswerSpec.from_loaded(loaded))


@pytest.fixture(scope="module")
def rollout(learner, smoke):
    """A fixed batch where groups disagree: 8 mazes x 4 episodes of the untrained model."""
    policy = ModelPolicy(learner.loaded, constrained=True)
    mazes = train_mazes(smoke.task.spec, 0, 8)
    return run_episodes(policy, mazes, smoke.task.env, samples=4, seed=3)


# bookkeeping ----------------------------------------------------------------------------------


def test_each_random_stream_of_a_step_has_its_own_seed():
    # numpy's SeedSequence pads its key with zeros: (seed, step) and (seed, step, 0) were one
    # seed, so a step's rollout drew from the same stream as its epoch-0 minibatch shuffle.
    assert rollout_seed(0, 5) != shuffle_seed(0, 5, 0)
    assert seed_for(1, 2) != seed_for(1, 2, 0)
    keys = [(s, t) for s in range(3) for t in range(40)]
    rollout = {rollout_seed(s, t) for s, t in keys}
    shuffle = {shuffle_seed(s, t, e) for s, t in keys for e in range(3)}
    assert len(rollout) == len(keys) and len(shuffle) == 3 * len(keys)
    assert not rollout & shuffle
    assert rollout_seed(0, 5) == rollout_seed(0, 5)  # a pure function: resumes redraw it
    rounds = {rollout_seed(s, t, r) for s, t in keys for r in range(1, 4)}  # dynamic sampling
    assert len(rounds) == 3 * len(keys) and not rounds & (rollout | shuffle)
    assert rollout_seed(0, 5, 0) == rollout_seed(0, 5)  # round 0 is the one-round stream
    with pytest.raises(UsageError, match="non-negative"):
        seed_for(-1, 2)  # abs() made seed -1 replay seed 1


def test_score_hand_computed():
    trajs = [_traj(0, r) for r in (1.0, 0.0, 1.0, 1.0)] + [_traj(5, 0.0) for _ in range(4)]
    plain = replace(LOCAL_TINY_RECIPE, fail_advantage=None)
    s = st.score(trajs, plain)
    # Expected: maze 0 mean 0.75, unbiased std sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5;
    # maze 5 all 0: advantage 0, dropped by the zero-variance filter.
    want = [0.25 / 0.5, -0.75 / 0.5, 0.25 / 0.5, 0.25 / 0.5, 0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(s.advantages, torch.tensor(want), atol=1e-5, rtol=0)
    assert s.keep.tolist() == [True] * 4 + [False] * 4
    dr = st.score(trajs, replace(plain, grpo_norm_by_std=False))  # Dr. GRPO: only mean-centred
    torch.testing.assert_close(dr.advantages, torch.tensor([0.25, -0.75, 0.25, 0.25, 0, 0, 0, 0]))
    # fail_advantage: maze 5's group all failed, so each episode gets -0.5 and is trained on;
    # maze 0 is unchanged, and an all-solved group would still be dropped.
    solved = [_traj(7, 1.0) for _ in range(4)]
    neg = st.score(trajs + solved, replace(LOCAL_TINY_RECIPE, fail_advantage=-0.5))
    torch.testing.assert_close(neg.advantages, torch.tensor(want[:4] + [-0.5] * 4 + [0.0] * 4))
    assert neg.keep.tolist() == [True] * 8 + [False] * 4
    assert neg.informative.tolist() == [True] * 4 + [False] * 8  # still zero-variance groups


def test_rollout_metrics_hand_computed():
    trajs = [_traj(0, 1.0, 2), _traj(0, 0.0, 4), _traj(1, 0.0, 3), _traj(1, 0.0, 3)]
    m = st.rollout_metrics(trajs, st.score(trajs, LOCAL_TINY_RECIPE), n_groups=2)
    # Expected: reward (1 + 0 + 0 + 0) / 4; one solve in 4; turns (2 + 4 + 3 + 3) / 4 = 3;
    # maze 1's two episodes both failed: one zero-variance group.
    assert m == {
        "rollout/reward_mean": 0.25,
        "rollout/solve_rate": 0.25,
        "rollout/turns_mean": 3.0,
        "rollout/episodes": 4,
        "rollout/zero_variance_groups": 1,
        "rollout/groups": 2,
    }


def test_lr_drops_to_lr_late_from_its_step():
    g = GRPOConfig(lr=3e-4, lr_late=1e-4, lr_late_from=50, lr_end=None)
    assert [st.lr_at(g, n, 160) for n in (0, 49, 50, 160)] == [3e-4, 3e-4, 1e-4, 1e-4]
    assert st.lr_at(replace(g, lr_late=None), 160, 160) == 3e-4


def test_lr_end_falls_along_a_cosine_to_the_last_step():
    g = GRPOConfig(lr=3e-4, lr_late=1e-4, lr_late_from=50, lr_end=1e-5)
    rates = [st.lr_at(g, n, 151) for n in range(151)]
    assert rates[49] == 3e-4 and rates[50] == pytest.approx(1e-4)
    assert rates[100] == pytest.approx(5.5e-5) and rates[150] == pytest.approx(1e-5)
    assert all(a >= b for a, b in zip(rates[50:], rates[51:], strict=False))
    assert st.lr_at(replace(g, lr_late=None), 50, 151) == pytest.approx(3e-4)
    with pytest.raises(UsageError, match=r"grpo\.lr_end \(-1(\.0)?\) must be >= 0"):
        preset("smoke").with_overrides({"grpo.lr_end": "-1"})


def _schedule(ws_end: int | None, sched: ScheduleConfig) -> tuple[list[int], list[int]]:
    """Steps at which `due` asks for an eval and a checkpoint, the state advanced as the
    trainer does: warm start up to `ws_end`, then `sched.steps` GRPO steps."""
    s = TrainState(phase="grpo" if ws_end is None else "warm_start")
    evals, ckpts = [], []
    while s.grpo_steps < sched.steps:
        s.step += 1
        if s.phase == "grpo":
            s.grpo_steps += 1
        elif s.step == ws_end:
            s.phase, s.warm_start_end = "grpo", s.step
        todo = due(s, sched)
        evals += [s.step] * todo.eval
        ckpts += [s.step] * todo.checkpoint
    return evals, ckpts


def test_turn_budgets_are_the_shortest_path_plus_slack_capped_at_the_env(smoke):
    from rlkit.maze.core import shortest_path

    mazes, env = train_mazes(smoke.task.spec, 0, 50), smoke.task.env
    assert st.turn_budgets(mazes, env, None) is None
    paths = [len(shortest_path(m)) - 1 for m in mazes]
    assert st.turn_budgets(mazes, env, 0) == paths
    assert st.turn_budgets(mazes, env, 2) == [min(env.max_turns, n + 2) for n in paths]
    assert st.turn_budgets(mazes, replace(env, max_turns=3), 1) == [min(3, n + 1) for n in paths]
    half = st.turn_budgets(mazes, env, 0, tight_fraction=0.5)
    assert half == paths[:25] + [env.max_turns] * 25


def test_due_evals_and_checkpoints_by_hand(smoke):
    # smoke: 4 GRPO steps, eval every 2 GRPO steps, checkpoint every 2 global steps.
    # Warm start ends at 4: both there; GRPO steps 1..4 are global 5..8.
    assert _schedule(4, smoke.schedule) == ([4, 6, 8], [2, 4, 6, 8])
    # Ending at 3: GRPO step 2 is global 5 (eval); checkpoints at 2, 3 (boundary), 4, 6, 7 (last).
    assert _schedule(3, smoke.schedule) == ([3, 5, 7], [2, 3, 4, 6, 7])
    # No warm start, 5 steps, eval every 2, checkpoint every 3: the last step gets both.
    sched = replace(smoke.schedule, steps=5, eval_every=2, ckpt_every=3)
    assert _schedule(None, sched) == ([2, 4, 5], [3, 5])


def test_grouped_minibatches_cover_every_index_once_and_never_cut_a_group():
    keys = [0, 0, 1, 2, 2, 2, 3, 4, 4, 5]
    got = grouped_minibatches(keys, 4, torch.Generator().manual_seed(0))
    assert sorted(i for mb in got for i in mb) == list(range(10))
    assert all(len(mb) <= 4 for mb in got)
    for k in set(keys):  # every group lies in one minibatch
        assert sum(any(keys[i] == k for i in mb) for mb in got) == 1
    assert got == grouped_minibatches(keys, 4, torch.Generator().manual_seed(0))  # seeded
    assert got != grouped_minibatches(keys, 4, torch.Generator().manual_seed(1))
    assert grouped_minibatches([7] * 6, 4, torch.Generator()) == [list(range(6))]  # alone


# turn samples and the update on the tiny model ------------------------------------------------


def test_turn_samples_one_row_per_turn_of_each_kept_episode(learner, rollout, smoke):
    scores = st.score(rollout, smoke.recipe)
    encode = learner.loaded.encoder.encode
    samples = st.turn_samples(rollout, scores, encode, smoke.task.env, history=smoke.task.history)
    kept = [
        (t, a)
        for t, a, k in zip(rollout, scores.advantages.tolist(), scores.keep.tolist(), strict=True)
        if k
    ]
    assert kept and len(samples) == sum(len(t.turns) for t, _ in kept)
    rows = [(turn, a) for t, a in kept for turn in t.turns]
    for x, (turn, a) in zip(samples, rows, strict=True):
        assert x.prompt.prompt_ids == turn.prompt_ids and x.response_ids == turn.response_ids
        assert x.old_logprobs == turn.logprobs and x.advantage == a
    bad = [replace(t, turns=[replace(u, prompt_ids=[0]) for u in t.turns]) for t in rollout]
    with pytest.raises(RuntimeError, match="rollout and trainer disagree"):
        st.turn_samples(bad, scores, encode, smoke.task.env, history=smoke.task.history)


def test_one_update_changes_parameters_and_lowers_loss(learner, rollout, smoke):
    scores = st.score(rollout, smoke.recipe)
    encode = learner.loaded.encoder.encode
    samples = st.turn_samples(rollout, scores, encode, smoke.task.env, history=smoke.task.history)
    g = replace(smoke.grpo, epochs=1, minibatch=len(samples))
    before = {k: v.clone() for k, v in learner.loaded.model.named_parameters()}
    with torch.no_grad():
        loss0 = float(minibatch_loss(learner, samples, smoke.recipe).out.loss)
    metrics = update(learner, samples, g, smoke.recipe, lr=1e-4, seed=0, step=1)
    with torch.no_grad():
        loss1 = float(minibatch_loss(learner, samples, smoke.recipe).out.loss)
    model = learner.loaded.model
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert changed and loss1 < loss0
    assert learner.opt.param_groups[0]["lr"] == 1e-4 and not model.training
    assert {"loss/policy", "loss/grad_norm", "loss/entropy"} <= set(metrics)
    assert update(learner, [], g, smoke.recipe, lr=1e-4, seed=0, step=2) == {}


def test_the_reference_is_computed_once_per_update_and_gives_the_same_loss(learner, rollout, smoke):
    scores = st.score(rollout, smoke.recipe)
    encode = learner.loaded.encoder.encode
    samples = st.turn_samples(rollout, scores, encode, smoke.task.env, history=smoke.task.history)
    assert with_reference(learner, samples, 8) == samples  # no reference: nothing to add
    ref = replace(learner.loaded, model=copy.deepcopy(learner.loaded.model))
    with torch.no_grad():  # a reference that differs from the policy, so the KL is not zero
        for p in ref.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    with_ref = replace(learner, ref=ref)
    cached = with_reference(with_ref, samples, 8)  # several chunks of 8 rows
    assert [x.ref_logprobs is not None for x in cached] == [True] * len(samples)
    assert [len(x.ref_logprobs) for x in cached] == [len(x.response_ids) for x in samples]
    r = replace(smoke.recipe, kl_loss_coef=0.1)
    with torch.no_grad():
        fresh = minibatch_loss(with_ref, samples, r).out.metrics
        reused = minibatch_loss(with_ref, cached, r).out.metrics
    assert fresh["loss/kl"] > 0
    assert reused == pytest.approx(fresh, rel=1e-4, abs=1e-6)


def test_zero_variance_filter_off_keeps_every_turn_and_still_counts_the_groups(
    learner, rollout, smoke
):
    r = replace(smoke.recipe, zero_variance_filter=False)
    scores = st.score(rollout, r)
    encode = learner.loaded.encoder.encode
    samples = st.turn_samples(rollout, scores, encode, smoke.task.env, history=smoke.task.history)
    assert len(samples) == sum(len(t.turns) for t in rollout)  # zero advantages included
    assert any(x.advantage == 0.0 for x in samples)
    n_groups = len({t.maze_index for t in rollout})
    on = st.rollout_metrics(rollout, st.score(rollout, smoke.recipe), n_groups)
    off = st.rollout_metrics(rollout, scores, n_groups)
    assert off == on and on["rollout/zero_variance_groups"] > 0


def test_reductions_average_over_episodes_even_with_one_answer_token_per_turn(
    learner, rollout, smoke
):
    encode = learner.loaded.encoder.encode
    scores = st.score(rollout, smoke.recipe)
    samples = st.turn_samples(rollout, scores, encode, smoke.task.env, history=smoke.task.history)
    episodes = sorted({x.episode for x in samples})[:6]
    samples = [x for x in samples if x.episode in episodes]
    turns = {e: sum(x.episode == e for x in samples) for e in episodes}
    assert len(set(turns.values())) > 1, "the check needs episodes of different lengths"
    g = replace(smoke.recipe, max_seq_len=12)
    with torch.no_grad():  # constrained: each row has one loss token, so its loss is the row's
        row = [float(minibatch_loss(learner, [x], g).out.metrics["loss/policy"]) for x in samples]
        got = {
            r: float(minibatch_loss(learner, samples, replace(g, loss_reduction=r)).out.loss)
            for r in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")
        }
    by_ep = {e: [v for v, x in zip(row, samples, strict=True) if x.episode == e] for e in episodes}
    # Expected: token_mean averages turns; the other two average episodes, as SkyRL's one
    # row per episode does: 1/G sum_i mean_t, and 1/G sum_i sum_t / max_seq_len.
    want = {
        "token_mean": sum(row) / len(row),
        "sequence_mean": sum(sum(v) / len(v) for v in by_ep.values()) / len(by_ep),
        "seq_mean_token_sum_norm": sum(sum(v) / 12 for v in by_ep.values()) / len(by_ep),
    }
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert got["sequence_mean"] != pytest.approx(got["token_mean"], rel=1e-3)


def test_minibatches_hold_whole_episodes_in_a_seeded_random_order():
    from rlkit.model.chat import Encoded

    episodes = [0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 3, 4, 5, 5]  # the episode of each sample
    samples = [
        TurnSample(Encoded([9, i], [], 4), [0], [0.0], 0.0, e) for i, e in enumerate(episodes)
    ]
    orders = [
        minibatch_order(samples, GRPOConfig(minibatch=4), torch.Generator().manual_seed(seed))
        for seed in (0, 0, 1)
    ]
    got = orders[0]
    assert sorted(i for mb in got for i in mb) == list(range(len(episodes)))
    for mb in got:  # never an episode cut in two; over 4 turns only as one episode alone
        eps = {episodes[i] for i in mb}
        assert all(episodes.count(e) == sum(episodes[i] == e for i in mb) for e in eps)
        assert len(mb) <= 4 or len(eps) == 1
    assert orders[0] == orders[1] and orders[0] != orders[2]
