"""Step-level credit (GiGPO, `recipe.advantage_estimator=gigpo`): the math on hand-worked
groups, a plain-loop equivalence on played episodes, and the per-turn advantages `score` and
`turn_samples` hand the loss."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlkit.env.maze_env import EnvConfig
from rlkit.episodes.policies import EpsOraclePolicy
from rlkit.episodes.rollout import Trajectory, Turn, run_episodes, turn_prompts
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_spec, train_mazes
from rlkit.model.chat import Encoded
from rlkit.notebook.rollouts import episode_label
from rlkit.recipe import Recipe
from rlkit.run import captures
from rlkit.train import grpo
from rlkit.train import step as st
from rlkit.train.config import apply_recipe
from rlkit.train.presets import preset
from rlkit.train.update_check import loss_weights

GIGPO = Recipe(advantage_estimator="gigpo", grpo_norm_by_std=False, gigpo_gamma=0.5)


def _episode(group: int, reward: float, squares: list[tuple[int, int]]) -> Trajectory:
    turns = [Turn("", [], None, sq, sq) for sq in squares]
    return Trajectory({}, group, 0, turns, reward=reward, terminated=reward > 0)


def test_discounted_returns_by_hand():
    got = grpo.discounted_returns(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([3, 2, 1]), 0.5)
    # Expected: [0.5**2, 0.5, 1] * 1, [0, 0] * 0, [1] * 2
    assert got.tolist() == [0.25, 0.5, 1.0, 0.0, 0.0, 2.0]


def test_anchor_advantages_by_hand():
    returns = torch.tensor([1.0, 0.5, 0.0, 0.25, 0.8, 0.8])
    anchors = torch.tensor([[0, 4], [0, 4], [0, 4], [0, 5], [1, 4], [1, 4]])
    # Expected: group (0, 4) mean 0.5 -> [0.5, 0, -0.5]; (0, 5) alone -> 0; (1, 4) equal -> 0
    plain = grpo.anchor_advantages(returns, anchors, norm_by_std=False)
    assert plain.tolist() == pytest.approx([0.5, 0.0, -0.5, 0.0, 0.0, 0.0])
    # Expected: unbiased std of (0.5, 0, -0.5) is sqrt(0.5 / 2) = 0.5 -> [1, 0, -1]
    normed = grpo.anchor_advantages(returns, anchors)
    assert normed.tolist() == pytest.approx([1.0, 0.0, -1.0, 0.0, 0.0, 0.0], abs=1e-5)


def test_step_credit_on_a_hand_worked_group():
    # maze 7: episode 0 solved in 2 turns from (0, 0) via (0, 1); episode 1 failed after
    # (0, 0) -> (1, 0) -> (0, 0). Maze 8 stands on (0, 0) too, in its own group.
    trajs = [
        _episode(7, 1.0, [(0, 0), (0, 1)]),
        _episode(7, 0.0, [(0, 0), (1, 0), (0, 0)]),
        _episode(8, 1.0, [(0, 0)]),
        _episode(8, 1.0, [(0, 0)]),
    ]
    scores = st.score(trajs, GIGPO)
    # Expected: episode advantages (no std) [0.5, -0.5, 0, 0]; returns (gamma 0.5)
    # [0.5, 1 | 0, 0, 0 | 1 | 1]; anchor (7, (0, 0)) = {0.5, 0, 0}, mean 1/6 ->
    # [1/3, -1/6, -1/6]; (7, (0, 1)), (7, (1, 0)) alone -> 0; (8, (0, 0)) = {1, 1} -> 0
    expected = [0.5 + 1 / 3, 0.5, -0.5 - 1 / 6, -0.5, -0.5 - 1 / 6, 0.0, 0.0]
    assert scores.advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert scores.turn_advantages.tolist() == pytest.approx(expected)
    # Expected: omega 2 doubles the step term only
    doubled = st.score(trajs, replace(GIGPO, gigpo_step_weight=2.0)).turn_advantages
    assert doubled.tolist() == pytest.approx(
        [0.5 + 2 / 3, 0.5, -0.5 - 1 / 3, -0.5, -0.5 - 1 / 3, 0, 0]
    )
    assert st.score(trajs, replace(GIGPO, advantage_estimator="grpo")).turn_advantages is None


def test_failed_groups_keep_fail_advantage_and_get_no_step_term():
    trajs = [_episode(3, 0.0, [(0, 0), (0, 1)]), _episode(3, 0.0, [(0, 0), (1, 0)])]
    scores = st.score(trajs, replace(GIGPO, fail_advantage=-1.0))
    # Expected: every return is 0, so each turn keeps its episode's -1
    assert scores.turn_advantages.tolist() == [-1.0] * 4


def _plain_step_credit(trajs: list[Trajectory], recipe: Recipe) -> list[float]:
    """The definition as loops: returns per turn, anchor groups as dict keys."""
    rewards = torch.tensor([t.reward for t in trajs])
    groups = torch.tensor([t.maze_index for t in trajs])
    a_ep = grpo.group_advantages(rewards, groups, norm_by_std=recipe.grpo_norm_by_std).tolist()
    rows = []
    for i, t in enumerate(trajs):
        for k, u in enumerate(t.turns):
            ret = recipe.gigpo_gamma ** (len(t.turns) - 1 - k) * t.reward
            rows.append((i, (t.maze_index, u.pos_before), ret))
    members: dict = {}
    for _, key, ret in rows:
        members.setdefault(key, []).append(ret)
    out = []
    for i, key, ret in rows:
        rs = torch.tensor(members[key], dtype=torch.float64)
        step = 0.0
        if len(rs) > 1:
            step = float(ret - rs.mean())
            if recipe.grpo_norm_by_std:
                step /= float(rs.std()) + 1e-6
        out.append(a_ep[i] + recipe.gigpo_step_weight * step)
    return out


@pytest.fixture(scope="module")
def played():
    """Eps-oracle episodes of 6 `test` training mazes, 4 each, on the env's budget."""
    mazes = train_mazes(pinned_spec("test"), 0, 6)
    return run_episodes(EpsOraclePolicy(0.4), mazes, EnvConfig(), samples=4, seed=5)


@pytest.mark.parametrize("norm", [True, False])
def test_step_credit_equals_the_plain_loops_on_played_episodes(played, norm):
    recipe = Recipe(advantage_estimator="gigpo", grpo_norm_by_std=norm, gigpo_step_weight=0.7)
    got = st.score(played, recipe).turn_advantages
    assert got.tolist() == pytest.approx(_plain_step_credit(played, recipe), abs=1e-5)
    assert len({round(x, 6) for x in got.tolist()}) > len(played) // 4  # varies within episodes


def test_turn_samples_carry_each_turns_own_advantage(played):
    def encode(msgs: list[dict]) -> Encoded:
        return Encoded([len(msgs), len(str(msgs))], [], 4)

    env = EnvConfig()
    trajs = [
        replace(t, turns=[replace(u, prompt_ids=encode(m).prompt_ids) for u, m in pairs])
        for t in played
        for pairs in [list(zip(t.turns, turn_prompts(t, env), strict=True))]
    ]
    recipe = Recipe(advantage_estimator="gigpo", zero_variance_filter=True)
    scores = st.score(trajs, recipe)
    samples = st.turn_samples(trajs, scores, encode, env)
    per_turn = iter(scores.turn_advantages.tolist())
    expected = [
        (e, a)
        for e, (t, k) in enumerate(zip(trajs, scores.keep.tolist(), strict=True))
        for a in [next(per_turn) for _ in t.turns]
        if k
    ]
    assert [x.episode for x in samples] == [e for e, _ in expected]
    assert [x.advantage for x in samples] == pytest.approx([a for _, a in expected])
    assert len(samples) < sum(len(t.turns) for t in trajs)  # a zero-variance group left


def test_the_switch_is_checked_and_refused_with_skyrls_dynamic_sampling():
    r = Recipe(advantage_estimator="gigpo")
    assert r.refusals("local") == [] and r.refusals("skyrl") == []  # SkyRL: with a window
    (line,) = replace(r, dynamic_sampling_type="filter").refusals("skyrl")
    assert line.startswith("recipe.advantage_estimator=gigpo with dynamic_sampling_type")
    with pytest.raises(UsageError, match="gigpo_gamma"):
        Recipe(gigpo_gamma=0.0)
    with pytest.raises(UsageError, match="gigpo_step_weight"):
        Recipe(gigpo_step_weight=-1.0)
    cfg = apply_recipe(preset("smoke"), {"advantage_estimator": "gigpo", "gigpo_gamma": "0.9"})
    assert cfg.recipe.gigpo_gamma == 0.9


def _hand_worked_with_a_dropped_group() -> list[Trajectory]:
    """The hand-worked group of maze 7, and maze 8 solved twice: equal rewards (the zero-variance
    filter drops it) but unequal returns on (0, 0)."""
    return [
        _episode(7, 1.0, [(0, 0), (0, 1)]),
        _episode(7, 0.0, [(0, 0), (1, 0), (0, 0)]),
        _episode(8, 1.0, [(0, 0)]),
        _episode(8, 1.0, [(0, 0), (0, 1)]),
    ]


def test_a_gigpo_capture_round_trips_the_turn_advantages_its_loss_used(tmp_path):
    trajs = _hand_worked_with_a_dropped_group()
    scores = st.score(trajs, replace(GIGPO, zero_variance_filter=True))
    # Expected: maze 8's returns on (0, 0) are {1, 0.5}, mean 0.75 -> [+0.25 | -0.25, 0]
    assert scores.turn_advantages[5:].tolist() == pytest.approx([0.25, -0.25, 0.0])
    assert scores.keep.tolist() == [True, True, False, False]
    sched = replace(preset("smoke").schedule, capture_groups=2)
    st.capture(tmp_path, 3, trajs, scores, sched, "r@3")
    back = captures.read_step(tmp_path, 3)
    per_turn = scores.turn_advantages.tolist()
    assert [e.turn_advantages for e in back] == [
        pytest.approx(per_turn[0:2]),
        pytest.approx(per_turn[2:5]),
        (0.0,),  # maze 8 dropped by the loss: 0 on every turn
        (0.0, 0.0),
    ]
    assert [e.advantage for e in back] == [0.5, -0.5, 0.0, 0.0]
    assert episode_label(back[0]).endswith("advantage +0.50 (turns +0.50 to +0.83)")


def test_a_grpo_capture_has_no_turn_advantages(tmp_path):
    trajs = _hand_worked_with_a_dropped_group()
    scores = st.score(trajs, replace(GIGPO, advantage_estimator="grpo"))
    st.capture(tmp_path, 3, trajs, scores, preset("smoke").schedule, "r@3")
    text = captures.step_path(tmp_path, 3).read_text()
    assert "turn_advantages" not in text
    assert all(e.turn_advantages is None for e in captures.read_step(tmp_path, 3))


def test_the_update_check_weights_each_turn_by_its_loss_advantage():
    trajs = _hand_worked_with_a_dropped_group()
    gigpo = st.score(trajs, replace(GIGPO, zero_variance_filter=True))
    # Expected: maze 7's turns as in the hand-worked group; maze 8 dropped -> 0
    assert loss_weights(trajs, gigpo) == [
        pytest.approx([0.5 + 1 / 3, 0.5]),
        pytest.approx([-0.5 - 1 / 6, -0.5, -0.5 - 1 / 6]),
        [0.0],
        [0.0, 0.0],
    ]
    grpo_ = st.score(trajs, replace(GIGPO, advantage_estimator="grpo", zero_variance_filter=True))
    # Expected: under grpo each turn its episode's advantage
    assert loss_weights(trajs, grpo_) == [[0.5] * 2, [-0.5] * 3, [0.0], [0.0] * 2]
