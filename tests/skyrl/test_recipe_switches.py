"""Each recipe switch changes the same thing on both backends: one test per switch.

The SkyRL side is SkyRL's own config (`SkyRLTrainConfig.from_cli_overrides` of the preset's
overrides, then `validate_cfg`) and SkyRL's own math (`ppo_utils`, the KL and entropy terms as
its worker reduces them); the local side is `rlkit.train.grpo` / `step` under the
same `Recipe`. Losses are compared on multi-turn episodes laid out both ways: SkyRL's one row
per episode (observation tokens masked) and the local trainer's one row per turn with the
episode as `seq_ids`. A switch a backend cannot honour is refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skyrl.backends.skyrl_train.utils import ppo_utils as sky
from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean as sky_masked_mean
from skyrl.train.config import AlgorithmConfig, SkyRLTrainConfig
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.trainer_utils import handle_filter_sampling

from rlkit import recipe as rc
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.episodes.rollout import Trajectory, Turn
from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train import grpo, policy_losses
from rlkit.train import step as st
from rlkit.train.presets import preset as train_preset

TOL = {"atol": 1e-6, "rtol": 1e-5}
BASE = Recipe(kl_loss_coef=0.0)


def skyrl_cfg(recipe: Recipe, **preset_changes):
    """SkyRL's parsed and validated config for the 8B preset run with `recipe`."""
    overrides = build_overrides(get_preset("qwen3vl-8b", recipe=recipe, **preset_changes), "r")
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    return cfg


def episodes(seed: int = 0):
    """Multi-turn episodes both ways. Returns (episode rows (E, T) logprobs, old, ref, mask,
    token advantages) and (turn rows (R, t) of the same tensors, seq_ids): 4 episodes of 1-4
    turns, each turn's reply 1-3 tokens, observations between replies."""
    gen = torch.Generator().manual_seed(seed)
    layout = [[2], [1, 3, 2], [3, 1, 1, 2], [2, 2]]  # reply tokens of each turn
    advs = torch.tensor([1.0, -0.5, 0.75, -1.25])
    width = max(sum(r) + 2 * len(r) for r in layout)
    e_lp, e_old, e_ref = (torch.zeros(len(layout), width) for _ in range(3))
    e_mask = torch.zeros(len(layout), width)
    t_rows, seq_ids = [], []
    for i, replies in enumerate(layout):
        pos = 0
        for n in replies:
            pos += 2  # an observation: masked out of the loss
            lp = -3.0 * torch.rand(n, generator=gen)
            old = lp + 0.4 * torch.randn(n, generator=gen)
            ref = lp + 0.4 * torch.randn(n, generator=gen)
            for t, (a, b, c) in enumerate(zip(lp, old, ref, strict=True)):
                e_lp[i, pos + t], e_old[i, pos + t], e_ref[i, pos + t] = a, b, c
                e_mask[i, pos + t] = 1.0
            t_rows.append((lp, old, ref))
            seq_ids.append(i)
            pos += n
    t_width = max(len(r[0]) for r in t_rows)
    t_lp, t_old, t_ref, t_mask = (torch.zeros(len(t_rows), t_width) for _ in range(4))
    for j, (lp, old, ref) in enumerate(t_rows):
        n = len(lp)
        t_lp[j, :n], t_old[j, :n], t_ref[j, :n], t_mask[j, :n] = lp, old, ref, 1.0
    ids = torch.tensor(seq_ids)
    e_adv = advs.unsqueeze(-1) * e_mask
    return (e_lp, e_old, e_ref, e_mask, e_adv), (t_lp, t_old, t_ref, t_mask, advs[ids], ids)


def sky_policy_loss(cfg, lp, old, adv, mask, *, micro: int | None = None):
    """SkyRL's policy loss on episode rows: advantages rescaled for the reduction, then the
    registered loss summed over micro-batches (its workers' gradient accumulation)."""
    a = cfg.trainer.algorithm
    scaled = sky.apply_loss_reduction_to_advantages_minibatch(
        adv, mask, a.loss_reduction, micro_batch_size=micro or len(lp), max_seq_len=a.max_seq_len
    )
    fn = sky.PolicyLossRegistry.get(a.policy_loss_type)
    return fn(lp, old, scaled, a, mask)[0]


def local_loss(recipe, t_lp, t_old, t_adv, t_mask, ids, **kw):
    return policy_losses.policy_loss(t_lp, t_old, t_adv, t_mask, recipe, seq_ids=ids, **kw)


# the vocabulary ----------------------------------------------------------------------------


def test_the_value_names_are_skyrl_registries_and_the_local_registries_are_the_local_lists():
    assert set(rc.POLICY_LOSSES) == set(sky.PolicyLossRegistry.list_available())
    skyrls = set(sky.AdvantageEstimatorRegistry.list_available())
    skyrls -= set(rc.RLKIT_ADVANTAGE_ESTIMATORS)  # gigpo, once rlkit has registered it
    assert set(rc.ADVANTAGE_ESTIMATORS) == skyrls
    assert set(policy_losses.POLICY_LOSSES) == set(rc.LOCAL_POLICY_LOSSES)
    assert set(grpo.REDUCTIONS) == set(rc.LOCAL_REDUCTIONS)
    assert set(grpo.KL_ESTIMATORS) == set(rc.KL_ESTIMATORS)
    assert set(grpo.ESTIMATORS) == set(rc.LOCAL_ADVANTAGE_ESTIMATORS)


def test_recipe_defaults_are_skyrl_defaults():
    cfg = SkyRLTrainConfig.from_cli_overrides(Recipe().skyrl_overrides())
    a, d = cfg.trainer.algorithm, AlgorithmConfig()
    for name in (
        "advantage_estimator",
        "grpo_norm_by_std",
        "eps_clip_low",
        "eps_clip_high",
        "policy_loss_type",
        "clip_ratio_c",
        "loss_reduction",
        "kl_loss_coef",
        "kl_estimator_type",
        "use_kl_loss",
        "use_kl_in_reward",
        "use_entropy_loss",  # its coefficient (SkyRL's 0.01) counts only when it is on
        "zero_variance_filter",
        "max_seq_len",
    ):
        assert getattr(a, name) == getattr(d, name), name
    assert a.off_policy_correction == d.off_policy_correction
    assert a.dynamic_sampling == d.dynamic_sampling
    assert cfg.generator.apply_overlong_filtering is False


# one test per switch -------------------------------------------------------------------------


def test_eps_clip_high_clip_higher():
    r = Recipe(kl_loss_coef=0.0, eps_clip_high=0.28)
    cfg = skyrl_cfg(r)
    assert (cfg.trainer.algorithm.eps_clip_low, cfg.trainer.algorithm.eps_clip_high) == (0.2, 0.28)
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(1)
    # episode 0 (advantage 1) gets a token in the band 1.2..1.28 that only clip-higher keeps
    e_lp[0, 2], e_old[0, 2] = -1.0, -1.0 - np.log(1.25)
    t_lp[0, 0], t_old[0, 0] = -1.0, -1.0 - np.log(1.25)
    ours = local_loss(r, t_lp, t_old, t_adv, t_mask, ids).loss
    torch.testing.assert_close(ours, sky_policy_loss(cfg, e_lp, e_old, e_adv, e_mask), **TOL)
    symmetric = local_loss(BASE, t_lp, t_old, t_adv, t_mask, ids).loss
    assert not torch.allclose(ours, symmetric)  # the switch changed the loss


def test_eps_clip_low():
    r = Recipe(kl_loss_coef=0.0, eps_clip_low=0.1)
    cfg = skyrl_cfg(r)
    assert (cfg.trainer.algorithm.eps_clip_low, cfg.trainer.algorithm.eps_clip_high) == (0.1, 0.2)
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(1)
    # episode 1 (advantage -0.5) gets a token at ratio 0.85: clipped at 0.9, not at 0.8
    e_lp[1, 2], e_old[1, 2] = -1.0, -1.0 - np.log(0.85)
    t_lp[1, 0], t_old[1, 0] = -1.0, -1.0 - np.log(0.85)
    ours = local_loss(r, t_lp, t_old, t_adv, t_mask, ids).loss
    torch.testing.assert_close(ours, sky_policy_loss(cfg, e_lp, e_old, e_adv, e_mask), **TOL)
    assert not torch.allclose(ours, local_loss(BASE, t_lp, t_old, t_adv, t_mask, ids).loss)


def test_clip_ratio_c_caps_dual_clip():
    r = Recipe(kl_loss_coef=0.0, policy_loss_type="dual_clip", clip_ratio_c=2.0)
    cfg = skyrl_cfg(r)
    assert cfg.trainer.algorithm.clip_ratio_c == 2.0
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(3)
    e_old[1], t_old[1:4] = e_old[1] - 1.5, t_old[1:4] - 1.5  # ratio ~e^1.5 > 3 > 2, A < 0
    ours = local_loss(r, t_lp, t_old, t_adv, t_mask, ids).loss
    torch.testing.assert_close(ours, sky_policy_loss(cfg, e_lp, e_old, e_adv, e_mask), **TOL)
    three = r.with_changes({"clip_ratio_c": 3.0})
    assert not torch.allclose(ours, local_loss(three, t_lp, t_old, t_adv, t_mask, ids).loss)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_norm_by_std_dr_grpo(norm):
    r = Recipe(kl_loss_coef=0.0, grpo_norm_by_std=norm)
    cfg = skyrl_cfg(r)
    assert cfg.trainer.algorithm.grpo_norm_by_std is norm
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    token_rewards = torch.zeros(8, 3)
    token_rewards[:, -1] = rewards
    want, _ = sky.compute_grpo_outcome_advantage(
        token_rewards, torch.ones(8, 3), np.array(groups.tolist()), grpo_norm_by_std=norm
    )
    torch.testing.assert_close(grpo.estimate(rewards, groups, r), want[:, 0], **TOL)


@pytest.mark.parametrize("reduction", rc.LOCAL_REDUCTIONS)
def test_loss_reduction_on_multi_turn_episodes(reduction):
    r = Recipe(kl_loss_coef=0.0, loss_reduction=reduction, max_seq_len=20)
    cfg = skyrl_cfg(r)
    assert cfg.trainer.algorithm.loss_reduction == reduction
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(2)
    ours = local_loss(r, t_lp, t_old, t_adv, t_mask, ids).loss
    torch.testing.assert_close(ours, sky_policy_loss(cfg, e_lp, e_old, e_adv, e_mask), **TOL)


@pytest.mark.parametrize("loss_type", rc.LOCAL_POLICY_LOSSES)
def test_policy_loss_type_on_multi_turn_episodes(loss_type):
    r = Recipe(kl_loss_coef=0.0, policy_loss_type=loss_type, loss_reduction="sequence_mean")
    cfg = skyrl_cfg(r)
    assert cfg.trainer.algorithm.policy_loss_type == loss_type
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(3)
    e_old[1], t_old[1:4] = e_old[1] - 1.5, t_old[1:4] - 1.5  # ratio ~e^1.5, A < 0: dual-clip
    sky_lp, our_lp = e_lp.clone().requires_grad_(), t_lp.clone().requires_grad_()
    want = sky_policy_loss(cfg, sky_lp, e_old, e_adv, e_mask)
    ours = local_loss(r, our_lp, t_old, t_adv, t_mask, ids).loss
    torch.testing.assert_close(ours, want, **TOL)
    want.backward()
    ours.backward()
    got_grad = torch.cat([our_lp.grad[j][t_mask[j].bool()] for j in range(len(t_lp))])
    torch.testing.assert_close(got_grad, sky_lp.grad[e_mask.bool()], **TOL)
    regular = local_loss(replace_recipe(r, "regular"), t_lp, t_old, t_adv, t_mask, ids).loss
    assert (loss_type == "regular") == bool(torch.isclose(ours.detach(), regular))


def replace_recipe(r: Recipe, loss_type: str) -> Recipe:
    return r.with_changes({"policy_loss_type": loss_type})


@pytest.mark.parametrize("estimator", rc.KL_ESTIMATORS)
def test_kl_term_is_per_episode_on_both_backends(estimator):
    r = Recipe(kl_loss_coef=0.1, kl_estimator_type=estimator)
    cfg = skyrl_cfg(r)
    a = cfg.trainer.algorithm
    assert (a.use_kl_loss, a.use_kl_in_reward, a.kl_loss_coef) == (True, False, 0.1)
    (e_lp, _, e_ref, e_mask, _), (t_lp, _, t_ref, t_mask, t_adv, ids) = episodes(4)
    # SkyRL's worker: token mean per episode row, averaged over the episodes
    kl = sky.compute_approx_kl(e_lp, e_ref, e_mask, kl_estimator_type=a.kl_estimator_type)
    want = sky_masked_mean(kl, e_mask, dim=-1).mean()
    zero = torch.zeros_like(t_adv)
    out = local_loss(r, t_lp, t_lp, zero, t_mask, ids, ref_logprobs=t_ref)
    assert out.metrics["loss/kl"] == pytest.approx(float(want), abs=1e-6)
    torch.testing.assert_close(out.loss, a.kl_loss_coef * want, **TOL)
    # the old per-row (per-turn) reduction weighed long episodes more: it differs here
    per_turn = grpo.masked_mean(grpo.kl_estimate(t_lp, t_ref, estimator), t_mask, dim=-1).mean()
    assert float(per_turn) != pytest.approx(float(want), rel=1e-3)


def test_kl_placement_reward_is_skyrl_only():
    r = Recipe(kl_loss_coef=0.01, kl_placement="reward")
    a = skyrl_cfg(r).trainer.algorithm
    assert (a.use_kl_loss, a.use_kl_in_reward) == (False, True)
    with pytest.raises(UsageError, match="kl_placement=reward: the local trainer") as e:
        train_preset("smoke").with_overrides(
            {"recipe.kl_placement": "reward", "recipe.kl_loss_coef": 0.01}
        )
    assert "\n" not in str(e.value)


def test_entropy_loss_coef():
    r = Recipe(kl_loss_coef=0.0, entropy_loss_coef=0.01)
    a = skyrl_cfg(r).trainer.algorithm
    assert a.use_entropy_loss and a.entropy_loss_coef == 0.01
    (e_lp, e_old, _, e_mask, e_adv), (t_lp, t_old, _, t_mask, t_adv, ids) = episodes(5)
    gen = torch.Generator().manual_seed(5)
    t_ent = torch.rand(t_lp.shape, generator=gen) * t_mask
    e_ent = torch.zeros_like(e_lp)
    e_ent[e_mask.bool()] = torch.cat([t_ent[j][t_mask[j].bool()] for j in range(len(t_lp))])
    # SkyRL's worker, one micro-batch: policy loss - coef * masked_mean(entropy, loss_mask)
    want = sky_policy_loss(skyrl_cfg(r), e_lp, e_old, e_adv, e_mask)
    want = want - a.entropy_loss_coef * sky_masked_mean(e_ent, e_mask)
    ours = local_loss(r, t_lp, t_old, t_adv, t_mask, ids, entropy=t_ent).loss
    torch.testing.assert_close(ours, want, **TOL)


@pytest.mark.parametrize("tis", ["token", "sequence"])
def test_tis_ratio_type_is_skyrl_only(tis):
    r = Recipe(
        kl_loss_coef=0.0,
        tis_ratio_type=tis,
        token_tis_ratio_clip_high=1.5,
        sequence_tis_ratio_clip_high=4.0,
    )
    cfg = skyrl_cfg(r, temperature=0.8)  # with TIS on, sampling may differ from 1
    opc = cfg.trainer.algorithm.off_policy_correction
    assert (opc.tis_ratio_type, opc.token_tis_ratio_clip_high) == (tis, 1.5)
    assert opc.sequence_tis_ratio_clip_high == 4.0
    (e_lp, e_old, _, e_mask, e_adv), _ = episodes(6)
    rollout = e_old + 0.5  # vLLM's logprobs off the trainer's: the weights cap and change the loss
    a = cfg.trainer.algorithm
    fn = sky.PolicyLossRegistry.get(a.policy_loss_type)
    on = fn(e_lp, e_old, e_adv, a, e_mask, rollout_logprobs=rollout)[0]
    off = fn(e_lp, e_old, e_adv, skyrl_cfg(BASE).trainer.algorithm, e_mask, rollout)[0]
    assert not torch.isclose(on, off)
    with pytest.raises(UsageError, match=f"recipe.tis_ratio_type={tis}: the local trainer"):
        train_preset("smoke").with_overrides({"recipe.tis_ratio_type": tis})


def _traj(maze: int, reward: float, last_reply: list[int]) -> Trajectory:
    turn = Turn("", [], None, (0, 0), (0, 0), response_ids=last_reply)
    return Trajectory({}, maze, 0, [turn], reward, terminated=reward > 0)


def test_dynamic_sampling_filter():
    r = Recipe(kl_loss_coef=0.0, dynamic_sampling_type="filter", max_sample_batches=3)
    ds = skyrl_cfg(r).trainer.algorithm.dynamic_sampling
    assert (ds.type, ds.max_sample_batches) == ("filter", 3)
    # three groups differ (mazes 0, 2, 3), maze 1 all solved; a batch of 2 groups
    rewards = {0: [1, 0], 1: [1, 1], 2: [0, 1], 3: [1, 0]}
    trajs = [_traj(m, float(x), [5]) for m, rs in rewards.items() for x in rs]
    scores = st.score(trajs, r)
    assert not st.enough_groups(scores, r, 4, rounds=1)  # 3 of 4: draw another round
    assert st.enough_groups(scores, r, 3, rounds=1) and st.enough_groups(scores, r, 4, 3)
    kept = st.score(trajs, r, batch_groups=2).keep.tolist()
    assert kept == [True, True, False, False, True, True, False, False]
    # SkyRL's own filter on the same rewards keeps the same episodes: the first 2 groups that differ
    gen_out = {
        "rewards": [t.reward for t in trajs],
        "prompt_token_ids": [[1]] * len(trajs),
        "response_ids": [[i] for i in range(len(trajs))],
        "loss_masks": [[1]] * len(trajs),
    }
    uids = [str(t.maze_index) for t in trajs]
    sampling = {"train_batch_size": 2, "n_samples_per_prompt": 2}
    out, _, more, _ = handle_filter_sampling(gen_out, uids, sampling, {"sample_batch_count": 1})
    assert not more and [i for (i,) in out["response_ids"]] == [i for i, k in enumerate(kept) if k]
    off = st.score(trajs, BASE, batch_groups=2)
    assert off.keep.all() and st.enough_groups(off, BASE, 100, rounds=1)
    with pytest.raises(UsageError, match="dynamic_sampling_type=replace: the local trainer"):
        train_preset("smoke").with_overrides({"recipe.dynamic_sampling_type": "replace"})


def test_apply_overlong_filtering():
    from skyrl.train.generators.utils import apply_overlong_filtering

    r = Recipe(kl_loss_coef=0.0, apply_overlong_filtering=True)
    assert skyrl_cfg(r).generator.apply_overlong_filtering is True
    eos = 9
    replies = [[3, eos], [3, 4], [eos], [4, 4]]  # episodes 1 and 3 were cut at the limit
    trajs = [_traj(0, 1.0, replies[0]), _traj(0, 0.0, replies[1])]
    trajs += [_traj(1, 0.0, replies[2]), _traj(1, 1.0, replies[3])]
    stop = ["stop" if ids[-1] == eos else "length" for ids in replies]
    sky_masks = apply_overlong_filtering([[1, 1]] * 4, stop)
    ours = st.score(trajs, r, stop_ids=(eos, 10))
    assert ours.keep.tolist() == [any(m) for m in sky_masks] == [True, False, True, False]
    # the cut episodes' rewards still count in their groups' baselines
    torch.testing.assert_close(ours.advantages, st.score(trajs, BASE).advantages)


def test_zero_variance_filter_is_local_only_with_skyrls_vlm_generator():
    r = Recipe(kl_loss_coef=0.0, zero_variance_filter=True)
    trajs = [_traj(0, 1.0, [1]), _traj(0, 1.0, [1]), _traj(1, 1.0, [1]), _traj(1, 0.0, [1])]
    assert st.score(trajs, r).keep.tolist() == [False, False, True, True]
    assert st.score(trajs, BASE).keep.all()
    # SkyRL's trainer filters only response-level rewards; its VLM generator's are per token
    # (the reward on the last generated token), so the key would be silently skipped
    assert "isinstance(rewards[0], list)" in _trainer_source()
    with pytest.raises(UsageError, match="zero_variance_filter=true: SkyRL applies it"):
        get_preset("qwen3vl-8b", zero_variance_filter=True)


def _trainer_source() -> str:
    import inspect

    from skyrl.train.trainer import RayPPOTrainer

    return inspect.getsource(RayPPOTrainer)


def test_fail_advantage_is_local_only():
    r = Recipe(kl_loss_coef=0.0, fail_advantage=-1.0)
    trajs = [_traj(0, 0.0, [1]), _traj(0, 0.0, [1]), _traj(1, 1.0, [1]), _traj(1, 0.0, [1])]
    assert st.score(trajs, r).advantages[:2].tolist() == [-1.0, -1.0]
    with pytest.raises(UsageError, match="fail_advantage=-1.0: SkyRL has no") as e:
        get_preset("qwen3vl-8b", fail_advantage=-1.0)
    assert "\n" not in str(e.value)


def test_advantage_estimator_beyond_grpo_is_skyrl_only():
    r = Recipe(kl_loss_coef=0.0, advantage_estimator="rloo")
    assert skyrl_cfg(r, capture_groups=0).trainer.algorithm.advantage_estimator == "rloo"
    with pytest.raises(
        UsageError, match="captured rollouts need advantage_estimator grpo.*set capture_groups=0"
    ):
        get_preset("qwen3vl-8b", recipe=r)  # the capture's advantages are rlkit's: grpo only
    with pytest.raises(UsageError, match="advantage_estimator=rloo: the local trainer has grpo"):
        train_preset("smoke").with_overrides({"recipe.advantage_estimator": "rloo"})
    for loss in sorted(set(rc.POLICY_LOSSES) - set(rc.LOCAL_POLICY_LOSSES)):
        assert loss in sky.PolicyLossRegistry.list_available()
        with pytest.raises(UsageError, match=f"policy_loss_type={loss}: the local trainer"):
            Recipe(policy_loss_type=loss).check_local()


def test_every_preset_recipe_passes_skyrl_validation_and_a_notebook_recipe_changes_it():
    for name in ("qwen3vl-8b", "qwen3vl-2b-smoke", "skyrl-tiny-cpu"):
        p = get_preset(name)
        cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(p, "r"))
        validate_cfg(cfg)
        assert cfg.trainer.algorithm.kl_loss_coef == p.recipe.kl_loss_coef
    local = train_preset("local-tiny").recipe
    assert local.refusals("local") == []
    assert [x.split("=")[0] for x in local.refusals("skyrl")] == [
        "recipe.zero_variance_filter",
        "recipe.fail_advantage",
    ]
    cluster_from_local = get_preset(
        "qwen3vl-8b", recipe={"kl_loss_coef": 0.05, "loss_reduction": "sequence_mean"}
    )
    assert cluster_from_local.recipe.changes() == {
        "kl_loss_coef": 0.05,
        "loss_reduction": "sequence_mean",
    }
    validate_cfg(SkyRLTrainConfig.from_cli_overrides(build_overrides(cluster_from_local, "r")))
