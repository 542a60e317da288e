"""rlkit.train.grpo against SkyRL's own GRPO math (`skyrl.backends.skyrl_train.utils.ppo_utils`).

Where rlkit mirrors SkyRL the tests assert equality to float32 tolerance; where it deliberately
differs (listed in the module docstring of `rlkit/train/grpo.py`) a test
asserts the difference on an input chosen to show it. SkyRL applies a loss reduction by
rescaling the advantages of a mini-batch (`apply_loss_reduction_to_advantages_minibatch`) and
then summing the per-token loss (`reduce_loss`) over micro-batches; rlkit writes the same
reduction as per-token weights. The two are defined to be equal at the level of the mini-batch sum, so that is where they are compared.
"""

import ast
import math
import typing
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import skyrl
import torch
from skyrl.backends.skyrl_train.utils import ppo_utils as sky
from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean as sky_masked_mean
from skyrl.train.config import AlgorithmConfig

from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train import grpo, policy_losses

pytestmark = pytest.mark.skyrl

TOL = {"atol": 1e-6, "rtol": 1e-5}


def _skyrl_function(relpath: str, name: str):
    """One pure function of a SkyRL module, compiled from the installed package's own source.

    `skyrl.train.utils.trainer_utils` imports transformers and SkyRL's workers (3 s) for
    functions that need none of them; compiling the one function keeps this file fast and still
    runs SkyRL's code, not a copy of it.
    """
    path = Path(skyrl.__file__).parent / relpath
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"defaultdict": defaultdict, "List": list, "Optional": typing.Optional}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[name]


zero_variance_filter = _skyrl_function("train/utils/trainer_utils.py", "zero_variance_filter")


def _sky_advantages(rewards, groups, mask, *, norm_by_std=True):
    """SkyRL's GRPO advantages (B, T): the outcome reward sits on the last token, as its trainer
    puts it, and the per-episode advantage comes back broadcast and multiplied by the mask."""
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1] = rewards
    index = np.array([f"maze-{g}" for g in groups.tolist()])
    adv, _ = sky.compute_grpo_outcome_advantage(
        token_rewards, mask, index, grpo_norm_by_std=norm_by_std
    )
    return adv


def _mask(lengths, width):
    return (torch.arange(width) < lengths.unsqueeze(-1)).float()


def _episode_mask(episodes):
    """SkyRL's layout: one right-padded row per episode, 1 on the model's own tokens only;
    episodes[i] lists its segments in order as `(n_tokens, is_model)`."""
    lengths = [sum(n for n, _ in segments) for segments in episodes]
    mask = torch.zeros(len(episodes), max(lengths))
    for i, segments in enumerate(episodes):
        pos = 0
        for n, is_model in segments:
            mask[i, pos : pos + n] = float(is_model)
            pos += n
    return mask


def _batch(seed, *, n_groups=4, group_size=5, width=9):
    """Rewards, shuffled group ids, a right-padded mask (one row empty) and logprobs whose
    ratios reach both clip bounds."""
    gen = torch.Generator().manual_seed(seed)
    b = n_groups * group_size
    groups = torch.arange(n_groups).repeat_interleave(group_size)[torch.randperm(b, generator=gen)]
    rewards = torch.randn(b, generator=gen)
    lengths = torch.randint(1, width + 1, (b,), generator=gen)
    lengths[3] = 0
    logp = -3.0 * torch.rand(b, width, generator=gen)
    old = logp + 0.5 * torch.randn(b, width, generator=gen)
    ref = logp + 0.5 * torch.randn(b, width, generator=gen)
    return rewards, groups, _mask(lengths, width), logp, old, ref


# advantages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("binary", [False, True])
def test_group_advantages_match_skyrl_grpo(norm_by_std, binary):
    gen = torch.Generator().manual_seed(3)
    groups = torch.cat([torch.arange(6).repeat_interleave(k) for k in (2, 8)])
    groups = groups[torch.randperm(groups.numel(), generator=gen)]
    rewards = torch.randn(groups.numel(), generator=gen)
    if binary:  # the maze env's 0/1 rewards: ties and some zero-variance groups
        rewards = (rewards > 0.3).float()
    mask = _mask(torch.randint(0, 6, (groups.numel(),), generator=gen), 6)
    ours = grpo.group_advantages(rewards, groups, norm_by_std=norm_by_std)
    # rlkit keeps one advantage per episode and broadcasts it over the row; the mask is applied
    # by the loss. SkyRL broadcasts and multiplies by the mask up front.
    torch.testing.assert_close(
        ours.unsqueeze(-1) * mask, _sky_advantages(rewards, groups, mask, norm_by_std=norm_by_std)
    )


def test_group_advantages_hand_computed_ties_and_zero_variance():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    groups = torch.arange(3).repeat_interleave(4)
    # Expected: group 0 mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5;
    # group 1 mean 0.5, std sqrt(4 * 0.25 / 3) = 1/sqrt(3); group 2 has zero variance -> 0.
    s1 = 1 / math.sqrt(3) + 1e-6
    expected = [0.75 / 0.500001] + [-0.25 / 0.500001] * 3 + [0.5 / s1] * 2 + [-0.5 / s1] * 2
    expected = torch.tensor(expected + [0.0] * 4)
    ours = grpo.group_advantages(rewards, groups)
    torch.testing.assert_close(ours, expected, **TOL)
    ones = torch.ones(12, 1)
    torch.testing.assert_close(_sky_advantages(rewards, groups, ones)[:, 0], expected, **TOL)


def test_group_of_one_episode_rejected_where_skyrl_uses_mean_0_std_1():
    # Deliberate: a lone episode has nothing to be compared with. SkyRL sets its group mean to 0
    # and std to 1, so the raw reward leaks through as advantage r / (1 + eps).
    rewards, groups = torch.tensor([0.75, 1.0, 0.0]), torch.tensor([0, 1, 1])
    sky_adv = _sky_advantages(rewards, groups, torch.ones(3, 1))[:, 0]
    # Expected: [0.75 / (1 + 1e-6), 1 / (0.7071 + 1e-6), -1 / (0.7071 + 1e-6)]
    s = math.sqrt(0.5) + 1e-6
    torch.testing.assert_close(sky_adv, torch.tensor([0.75 / 1.000001, 0.5 / s, -0.5 / s]))
    with pytest.raises(UsageError, match="group_size"):
        grpo.group_advantages(rewards, groups)


def test_zero_variance_group_exactly_zero_where_skyrl_float32_mean_is_an_ulp_off():
    # Deliberate: rlkit's group statistics are float64, where the mean of equal float32 rewards
    # is exact. SkyRL's float32 mean of eight 0.1s is one ulp (7.5e-9) off, and dividing by
    # std + eps = 1e-6 turns that into advantages of about -0.0074. The maze's 0/1 rewards are
    # exact in both (see the hand-computed test above).
    rewards, groups = torch.full((8,), 0.1), torch.zeros(8, dtype=torch.long)
    assert grpo.group_advantages(rewards, groups).abs().max() == 0.0
    sky_adv = _sky_advantages(rewards, groups, torch.ones(8, 1))[:, 0]
    assert 1e-3 < sky_adv.abs().max() < 0.1


def test_nonzero_variance_mask_matches_skyrl_zero_variance_filter():
    rewards = torch.tensor(
        [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
        + [0.5, 0.5 + 5e-7, 0.5, 0.5]  # spread 4.8e-7 <= tol: zero variance
        + [0.5, 0.5 + 2e-6, 0.5, 0.5]  # spread 2e-6 > tol: kept
    )
    groups = torch.arange(4).repeat_interleave(4)
    uids = [f"maze-{g}" for g in groups.tolist()]
    # Expected: groups 1 and 3 kept at the config's tol 1e-6; at the function's default 0.0 (exact
    # equality) group 2 is kept too and group 0 still dropped.
    for tol, want in ((1e-6, [1, 3]), (0.0, [1, 2, 3])):
        kept = zero_variance_filter(rewards.tolist(), uids, tol=tol)
        ours = grpo.nonzero_variance_mask(rewards, groups, tol=tol)
        assert torch.nonzero(ours).flatten().tolist() == kept
        assert sorted({i // 4 for i in kept}) == want


# policy loss --------------------------------------------------------------------------------


def test_clipped_surrogate_hand_computed_clip_higher_matches_skyrl_per_token():
    ratio = torch.tensor([[1.25, 1.5, 0.7, 0.7]])
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
    logp, old = ratio.log(), torch.zeros(1, 4)
    loss, clipped = policy_losses.clipped_surrogate(
        logp, old, adv, eps_clip_low=0.2, eps_clip_high=0.28
    )
    # Expected: -min(r A, clip(r, 0.8, 1.28) A) = [-1.25, -1.28, 0.8, -0.7]; the symmetric clip
    # (high 0.2) would cap the first token at -1.2.
    torch.testing.assert_close(loss, torch.tensor([[-1.25, -1.28, 0.8, -0.7]]), **TOL)
    assert clipped.tolist() == [[False, True, True, False]]
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28)
    for t in range(4):  # SkyRL's loss sums over the mask: a one-hot mask reads one token
        one_hot = torch.zeros(1, 4)
        one_hot[0, t] = 1.0
        sky_loss, _ = sky.ppo_policy_loss(logp, old, adv, cfg, one_hot)
        torch.testing.assert_close(sky_loss, loss[0, t], **TOL)


@pytest.mark.parametrize("reduction", grpo.REDUCTIONS)
def test_policy_loss_matches_skyrl_regular_loss_and_kl_term(reduction):
    rewards, groups, mask, logp, old, ref = _batch(1)
    b, width = mask.shape
    cfg = AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28, kl_loss_coef=0.005)
    ours_adv = grpo.group_advantages(rewards, groups)
    a, live = ours_adv.unsqueeze(-1).expand_as(logp), mask.bool()
    i, t = torch.nonzero(live & (a > 0))[0].tolist()
    old[i, t] = logp[i, t] - math.log(1.25)  # clipped at 1.2, not at 1.28
    ratio = (logp - old).exp()
    # The input exercises the lower clip, the upper clip, and the band clip-higher lets through.
    assert (live & (a < 0) & (ratio < 0.8)).any() and (live & (a > 0) & (ratio > 1.28)).any()
    assert (live & (a > 0) & (ratio > 1.2) & (ratio < 1.28)).any()

    sky_lp = logp.clone().requires_grad_()
    sky_adv = sky.apply_loss_reduction_to_advantages_minibatch(
        _sky_advantages(rewards, groups, mask),
        mask,
        reduction,
        micro_batch_size=b,
        max_seq_len=width,
    )
    sky_pg, sky_metrics = sky.PolicyLossRegistry.get(cfg.policy_loss_type)(
        sky_lp, old, sky_adv, cfg, mask
    )
    # worker.py's use_kl_loss term: token mean per sequence, averaged over sequences.
    sky_kl = sky_masked_mean(
        sky.compute_approx_kl(sky_lp, ref, mask, kl_estimator_type=cfg.kl_estimator_type),
        mask,
        dim=-1,
    ).mean()
    sky_total = sky_pg + cfg.kl_loss_coef * sky_kl
    sky_total.backward()

    our_lp = logp.clone().requires_grad_()
    recipe = Recipe(
        eps_clip_low=cfg.eps_clip_low,
        eps_clip_high=cfg.eps_clip_high,
        loss_reduction=reduction,
        max_seq_len=width,
        kl_loss_coef=cfg.kl_loss_coef,
        kl_estimator_type=cfg.kl_estimator_type,
    )
    out = policy_losses.policy_loss(our_lp, old, ours_adv, mask, recipe, ref_logprobs=ref)
    out.loss.backward()
    torch.testing.assert_close(out.loss.detach(), sky_total.detach(), **TOL)
    torch.testing.assert_close(our_lp.grad, sky_lp.grad, **TOL)
    assert out.metrics["loss/policy"] == pytest.approx(float(sky_pg.detach()), abs=1e-6)
    assert out.metrics["loss/kl"] == pytest.approx(float(sky_kl.detach()), abs=1e-6)
    assert out.metrics["loss/clip_fraction"] == pytest.approx(sky_metrics["clip_ratio"])


def test_dual_clip_is_a_loss_type_of_its_own_on_both_backends():
    # The default loss type ("regular", the one the cluster preset runs) has no dual clip on
    # either backend; "dual_clip" caps a negative-advantage token's loss at -A * clip_ratio_c
    # (3) however far its ratio has grown, in rlkit's registry as in SkyRL.
    assert AlgorithmConfig().policy_loss_type == "regular"
    logp, old, adv, mask = torch.tensor([[2.0]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), None
    ours, _ = policy_losses.clipped_surrogate(logp, old, adv)
    clips = Recipe(eps_clip_low=0.2, eps_clip_high=0.2, clip_ratio_c=3.0)
    ours_dual, _ = policy_losses.POLICY_LOSSES["dual_clip"](logp, old, adv, mask, clips)
    regular, _ = sky.ppo_policy_loss(logp, old, adv, AlgorithmConfig(), mask)
    dual, _ = sky.ppo_policy_loss(
        logp, old, adv, AlgorithmConfig(policy_loss_type="dual_clip"), mask
    )
    # Expected: ratio e^2 = 7.389, A = -1: -min(-7.389, -0.8) = 7.389; dual: min(3, 7.389) = 3
    torch.testing.assert_close(ours[0, 0], torch.tensor(math.exp(2.0)), **TOL)
    torch.testing.assert_close(regular, ours[0, 0], **TOL)
    torch.testing.assert_close(dual, torch.tensor(3.0), **TOL)
    torch.testing.assert_close(ours_dual[0, 0], dual, **TOL)


# reductions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", grpo.REDUCTIONS)
def test_reduction_weights_equal_skyrl_advantage_rescaling(reduction):
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([3, 8, 0, 5, 1, 7])  # one empty row: both still count it in B
    mask, width, micro = _mask(lengths, 8), 8, 2
    token_loss = torch.randn(6, width, generator=gen)
    scale = sky.apply_loss_reduction_to_advantages_minibatch(
        torch.ones(6, width), mask, reduction, micro_batch_size=micro, max_seq_len=width
    )
    weights = grpo.reduction_weights(mask, reduction, max_seq_len=width)
    torch.testing.assert_close(weights, scale * mask, **TOL)
    # SkyRL's workers sum the pre-scaled loss of each micro-batch (gradient accumulation).
    sky_sum = sum(
        sky.reduce_loss(token_loss[i : i + micro] * scale[i : i + micro], mask[i : i + micro])
        for i in range(0, 6, micro)
    )
    ours = grpo.reduce_loss(token_loss, mask, reduction, max_seq_len=width)
    torch.testing.assert_close(ours, sky_sum, **TOL)


def test_token_mean_legacy_hand_computed_equals_no_rlkit_reduction():
    # token_mean_legacy (SkyRL's visgym recipe's) splits the mini-batch into consecutive
    # micro-batches of micro_train_batch_size_per_gpu sequences, takes the token mean inside
    # each, and averages those means with equal weight: (1/K) sum_k sum_{k's tokens} l / n_k.
    token_loss = torch.tensor([[4.0, 0, 0, 0], [1.0, 1, 1, 1], [2.0, 2, 0, 0], [0.0, 0, 0, 0]])
    mask = _mask(torch.tensor([1, 4, 2, 2]), 4)
    scale = sky.apply_loss_reduction_to_advantages_minibatch(
        torch.ones(4, 4), mask, "token_mean_legacy", micro_batch_size=2, max_seq_len=4
    )
    legacy = sky.reduce_loss(token_loss * scale, mask)
    ours = {r: float(grpo.reduce_loss(token_loss, mask, r, max_seq_len=4)) for r in grpo.REDUCTIONS}
    # Expected: legacy (8/5 + 4/4) / 2 = 1.3; token_mean 12/9; sequence_mean (4 + 1 + 2 + 0) / 4;
    # seq_mean_token_sum_norm 12 / (4 * 4).
    assert float(legacy) == pytest.approx(1.3)
    assert all(v != pytest.approx(1.3) for v in ours.values())
    assert ours == pytest.approx(
        {"token_mean": 12 / 9, "sequence_mean": 1.75, "seq_mean_token_sum_norm": 0.75}
    )
    per_micro = [
        grpo.reduce_loss(token_loss[i : i + 2], mask[i : i + 2], "token_mean") for i in (0, 2)
    ]
    torch.testing.assert_close(legacy, sum(per_micro) / 2, **TOL)


@pytest.mark.parametrize(
    ("micro", "lengths", "same_as"),
    [
        (2, [3, 5, 6, 2, 4, 4], "token_mean"),  # every micro-batch holds 8 tokens
        (6, [3, 1, 6, 2, 8, 4], "token_mean"),  # one micro-batch is the whole mini-batch
        (1, [3, 1, 6, 2, 8, 4], "sequence_mean"),  # one sequence per micro-batch
    ],
)
def test_token_mean_legacy_equals_rlkit_only_in_special_cases(micro, lengths, same_as):
    gen = torch.Generator().manual_seed(9)
    mask = _mask(torch.tensor(lengths), 8)
    token_loss = torch.randn(6, 8, generator=gen)
    scale = sky.apply_loss_reduction_to_advantages_minibatch(
        torch.ones(6, 8), mask, "token_mean_legacy", micro_batch_size=micro, max_seq_len=8
    )
    legacy = sky.reduce_loss(token_loss * scale, mask)
    torch.testing.assert_close(legacy, grpo.reduce_loss(token_loss, mask, same_as), **TOL)


def test_masked_nan_never_reaches_the_loss_where_skyrl_reduce_loss_multiplies_it_in():
    # Deliberate: rlkit selects masked tokens out (torch.where); SkyRL multiplies by the mask,
    # and NaN * 0 is NaN, so one bad padded position poisons its whole loss.
    token_loss = torch.tensor([[1.0, 2.0, float("nan")]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(grpo.reduce_loss(token_loss, mask, "token_mean")) == pytest.approx(1.5)
    assert torch.isnan(sky.reduce_loss(token_loss * 0.5, mask))


def test_turn_rows_with_episode_ids_equal_skyrl_episode_rows_for_every_reduction():
    # The local trainer feeds one row per turn, each carrying its episode's advantage; SkyRL
    # trains one row per episode with observation tokens masked out. token_mean counts tokens,
    # so it does not care; sequence_mean counts rows, so turn rows and episode rows differ
    # unless the turn rows say which episode they belong to (seq_ids), as the trainer passes.
    episodes = [[(3, False), (2, True), (4, False), (3, True)], [(2, False), (4, True)]]
    ep_mask = _episode_mask(episodes)
    token_loss = torch.randn(ep_mask.shape, generator=torch.Generator().manual_seed(11))
    turns = []
    for i, segments in enumerate(episodes):
        pos = 0
        for n, is_model in segments:
            if is_model:
                turns.append(token_loss[i, pos : pos + n])
            pos += n
    turn_loss = torch.nn.utils.rnn.pad_sequence(turns, batch_first=True)
    turn_mask = _mask(torch.tensor([len(t) for t in turns]), turn_loss.shape[1])
    episode_of_turn = torch.tensor([0, 0, 1])
    for reduction in grpo.REDUCTIONS:
        scale = sky.apply_loss_reduction_to_advantages_minibatch(
            torch.ones_like(ep_mask), ep_mask, reduction, micro_batch_size=2, max_seq_len=12
        )
        sky_episode_rows = sky.reduce_loss(token_loss * scale, ep_mask)
        kw = {"max_seq_len": 12}
        rows = grpo.reduce_loss(turn_loss, turn_mask, reduction, **kw)
        turns = grpo.reduce_loss(turn_loss, turn_mask, reduction, seq_ids=episode_of_turn, **kw)
        torch.testing.assert_close(turns, sky_episode_rows, **TOL)
        assert torch.allclose(rows, sky_episode_rows, **TOL) == (reduction == "token_mean")


# KL -----------------------------------------------------------------------------------------


def test_kl_estimator_names_and_default_match_skyrl():
    assert set(grpo.KL_ESTIMATORS) == {"k1", "k2", "k3", "abs"}
    assert AlgorithmConfig().kl_estimator_type == Recipe().kl_estimator_type
    x = torch.zeros(1, 2)
    for alias in ("low_var_kl", "mse"):  # verl's names: neither side accepts them
        with pytest.raises(ValueError, match="Invalid KL estimator"):
            sky.compute_approx_kl(x, x, kl_estimator_type=alias)
        with pytest.raises(UsageError, match="unknown KL estimator"):
            grpo.kl_estimate(x, x, alias)  # type: ignore[arg-type]


def test_kl_estimates_hand_computed_with_clamps():
    delta = torch.tensor([[0.0, math.log(2.0), -math.log(2.0), 25.0, -25.0]])  # ref - logp
    logp = torch.zeros(1, 5)
    ref = logp + delta
    # Expected k3 = exp(d) - d - 1 with d clamped to [-20, 20], result clamped to [-10, 10]:
    # [0, 1 - ln 2, ln 2 - 1/2, 10 (exp(20) - 21), 10 (exp(-20) + 19)]
    k3 = [0.0, 1 - math.log(2.0), math.log(2.0) - 0.5, 10.0, 10.0]
    expected = {"k1": -delta, "abs": delta.abs(), "k2": delta**2 / 2, "k3": torch.tensor([k3])}
    for name, want in expected.items():
        torch.testing.assert_close(grpo.kl_estimate(logp, ref, name), want, **TOL)
        torch.testing.assert_close(sky.compute_approx_kl(logp, ref, kl_estimator_type=name), want)


@pytest.mark.parametrize("estimator", grpo.KL_ESTIMATORS)
def test_kl_term_matches_skyrl_with_nan_at_masked_positions(estimator):
    _, _, mask, logp, _, ref = _batch(7)
    ref[0, 0], ref[1, 0] = logp[0, 0] + 25.0, logp[1, 0] - 25.0  # reach both k3 clamps
    mask[0, 0] = mask[1, 0] = 1.0
    logp = torch.where(mask.bool(), logp, float("nan"))  # padding may hold anything
    sky_kl = sky.compute_approx_kl(logp, ref, mask, kl_estimator_type=estimator)
    ours = grpo.kl_estimate(logp, ref, estimator)
    torch.testing.assert_close(torch.where(mask.bool(), ours, 0.0), sky_kl, **TOL)
    recipe = Recipe(kl_loss_coef=0.0, kl_estimator_type=estimator)
    out = policy_losses.policy_loss(
        logp, logp, torch.zeros(mask.shape[0]), mask, recipe, ref_logprobs=ref
    )
    sky_term = sky_masked_mean(sky_kl, mask, dim=-1).mean()  # worker.py's use_kl_loss reduction
    assert out.metrics["loss/kl"] == pytest.approx(float(sky_term), abs=1e-6)
