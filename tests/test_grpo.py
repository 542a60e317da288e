"""GRPO math against hand-computed values, plus vectorised-vs-loop equivalence checks."""

import math
import statistics
from dataclasses import replace

import pytest
import torch

from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train import grpo, policy_losses

REDS = grpo.REDUCTIONS
PLAIN = Recipe(kl_loss_coef=0.0)
"""The plain loss: token_mean, regular, symmetric clip 0.2, no KL term, no entropy bonus."""


def test_group_advantages_mean_centred_without_std():
    rewards = torch.tensor([6.0, 3.0, 4.5, 1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([7, 7, 7, 2, 2, 2, 2])
    adv = grpo.group_advantages(rewards, groups, norm_by_std=False)
    # Expected: group 7 mean 4.5, group 2 mean 0.5
    expected = [6.0 - 4.5, 3.0 - 4.5, 4.5 - 4.5, 1.0 - 0.5, 0.0 - 0.5, 1.0 - 0.5, 0.0 - 0.5]
    torch.testing.assert_close(adv, torch.tensor(expected))


def test_group_advantages_divide_by_unbiased_std():
    rewards = torch.tensor([6.0, 3.0, 4.5, 1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    adv = grpo.group_advantages(rewards, groups, norm_by_std=True, eps=0.0)
    # Expected: group 0 std = sqrt((1.5^2 + 1.5^2 + 0) / 2) = 1.5;
    # group 1 mean 0.75, std = sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5
    expected = [1.5 / 1.5, -1.5 / 1.5, 0.0, 0.25 / 0.5, 0.25 / 0.5, 0.25 / 0.5, -0.75 / 0.5]
    torch.testing.assert_close(adv, torch.tensor(expected))


def test_group_advantages_zero_variance_group_is_zero_not_nan():
    adv = grpo.group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(adv, torch.zeros(4))


def test_group_advantages_matches_plain_loop():
    gen = torch.Generator().manual_seed(0)
    groups = torch.randint(0, 9, (200,), generator=gen)
    groups = torch.cat([groups, torch.arange(9), torch.arange(9)])  # every group has >= 2
    rewards = torch.rand(groups.numel(), generator=gen, dtype=torch.float64)
    fast = grpo.group_advantages(rewards, groups, norm_by_std=True)
    slow = []
    for i in range(groups.numel()):
        members = [float(rewards[j]) for j in range(groups.numel()) if groups[j] == groups[i]]
        mean, std = statistics.mean(members), statistics.stdev(members)
        slow.append((float(rewards[i]) - mean) / (std + 1e-6))
    torch.testing.assert_close(fast, torch.tensor(slow, dtype=torch.float64))


def test_group_of_one_is_refused_with_clear_message():
    with pytest.raises(UsageError, match=r"group_size \(1\) must be >= 2"):
        grpo.group_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    with pytest.raises(UsageError, match="NaN"):
        grpo.group_advantages(torch.tensor([1.0, math.nan]), torch.tensor([0, 0]))


def test_nonzero_variance_mask_drops_uniform_groups():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    keep = grpo.nonzero_variance_mask(rewards, groups)
    assert keep.tolist() == [False] * 3 + [True] * 3 + [False] * 3
    # A spread within tol counts as equal (float rewards from a judge).
    near = grpo.nonzero_variance_mask(torch.tensor([0.5, 0.5 + 1e-9]), torch.tensor([0, 0]))
    assert near.tolist() == [False, False]


def test_unsolved_group_mask_marks_groups_where_nobody_scored():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    assert grpo.unsolved_group_mask(rewards, groups).tolist() == [False] * 4 + [True] * 3


def test_clipped_surrogate_clip_higher_by_hand():
    old = torch.zeros(1, 4)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.5]]))
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0]])
    loss, clipped = policy_losses.clipped_surrogate(
        new, old, adv, eps_clip_low=0.2, eps_clip_high=0.28
    )
    # Expected: -min(1.5, 1.28), -min(0.5, 0.8), -min(1.1, 1.1), -min(-0.5, -0.8)
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -0.5, -1.1, 0.8]]))
    assert clipped.tolist() == [[True, False, False, True]]


def test_clipped_surrogate_broadcasts_episode_advantages_and_blocks_clipped_gradients():
    new = torch.log(torch.tensor([[1.5, 1.1], [0.9, 0.5]])).requires_grad_()
    adv = torch.tensor([2.0, -1.0])
    loss, clipped = policy_losses.clipped_surrogate(new, torch.zeros(2, 2), adv)
    # Expected: [-2*min(1.5,1.2), -2*1.1], [-(-1)*0.9, -min(-0.5,-0.8)]
    torch.testing.assert_close(loss.detach(), torch.tensor([[-2.4, -2.2], [0.9, 0.8]]))
    loss.sum().backward()
    grad = new.grad
    assert grad is not None
    # d(-rho*A)/dlogp = -rho*A where unclipped, 0 where the clipped branch won.
    torch.testing.assert_close(grad, torch.tensor([[0.0, -2.2], [0.9, 0.0]]))
    assert clipped.tolist() == [[True, False], [False, True]]


LOSS = torch.tensor([[1.0, 2.0, 3.0, math.nan], [4.0, math.inf, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        ("token_mean", (1 + 2 + 3 + 4) / 4),  # Expected: all tokens count equally
        ("sequence_mean", (6 / 3 + 4 / 1) / 2),  # Expected: mean of per-sequence means
        ("seq_mean_token_sum_norm", (6 + 4) / (2 * 8)),  # Expected: sums / (B * max_seq_len)
    ],
)
def test_reductions_by_hand_ignore_masked_nan(reduction, expected):
    got = grpo.reduce_loss(LOSS, MASK, reduction, max_seq_len=8)
    assert float(got) == pytest.approx(expected)


def test_reductions_with_sequence_ids_count_episodes_not_rows():
    # Three turn rows: episode 0 is rows 0 (1 token) and 1 (2 tokens), episode 1 is row 2.
    loss = torch.tensor([[2.0, 0.0], [4.0, 6.0], [3.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    ids = torch.tensor([7, 7, 2])
    got = {r: float(grpo.reduce_loss(loss, mask, r, max_seq_len=4, seq_ids=ids)) for r in REDS}
    # Expected: token_mean (2 + 4 + 6 + 3) / 4; sequence_mean ((2 + 4 + 6) / 3 + 3 / 1) / 2;
    # seq_mean_token_sum_norm ((2 + 4 + 6) / 4 + 3 / 4) / 2. Rows alone would give
    # (2 + 5 + 3) / 3 for sequence_mean: a turn of a long episode would weigh as an episode.
    assert got == pytest.approx(
        {"token_mean": 15 / 4, "sequence_mean": 3.5, "seq_mean_token_sum_norm": 1.875}
    )
    per_row = grpo.reduce_loss(loss, mask, "sequence_mean", seq_ids=torch.arange(3))
    assert float(per_row) == pytest.approx(10 / 3)
    assert per_row == grpo.reduce_loss(loss, mask, "sequence_mean")
    with pytest.raises(UsageError, match="one sequence id per row"):
        grpo.reduce_loss(loss, mask, "sequence_mean", seq_ids=torch.tensor([0, 1]))


def test_reduction_weights_split_over_micro_batches_equal_the_whole():
    gen = torch.Generator().manual_seed(1)
    loss = torch.randn(6, 5, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.4).float()
    for reduction in grpo.REDUCTIONS:
        whole = grpo.reduce_loss(loss, mask, reduction, max_seq_len=5)
        w = grpo.reduction_weights(mask, reduction, max_seq_len=5)
        parts = sum((loss[i : i + 2] * w[i : i + 2]).sum() for i in range(0, 6, 2))
        torch.testing.assert_close(parts, whole)


def test_reductions_match_plain_loops():
    gen = torch.Generator().manual_seed(2)
    loss = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    mask = (torch.rand(5, 7, generator=gen) > 0.5).double()
    mask[3] = 0.0  # an all-masked row must not divide by zero
    rows = [[float(x) for x, m in zip(loss[i], mask[i], strict=True) if m] for i in range(5)]
    n_tokens = sum(len(r) for r in rows)
    slow = {
        "token_mean": sum(sum(r) for r in rows) / n_tokens,
        "sequence_mean": sum(sum(r) / max(1, len(r)) for r in rows) / 5,
        "seq_mean_token_sum_norm": sum(sum(r) for r in rows) / (5 * 10),
    }
    for reduction, want in slow.items():
        assert float(grpo.reduce_loss(loss, mask, reduction, max_seq_len=10)) == pytest.approx(want)


def test_reduction_errors_say_what_to_fix():
    with pytest.raises(UsageError, match="max_seq_len"):
        grpo.reduce_loss(LOSS, MASK, "seq_mean_token_sum_norm")
    with pytest.raises(UsageError, match="token_mean"):
        grpo.reduce_loss(LOSS, MASK, "mean")  # type: ignore[arg-type]


def test_kl_estimators_by_hand():
    logp = torch.log(torch.tensor([[0.25, 0.5]]))
    ref = torch.log(torch.tensor([[0.5, 0.5]]))
    ln2 = math.log(2.0)
    # Expected with d = ref - logp = [ln2, 0]: k3 = e^d - d - 1
    torch.testing.assert_close(grpo.kl_estimate(logp, ref, "k3"), torch.tensor([[1 - ln2, 0.0]]))
    torch.testing.assert_close(grpo.kl_estimate(logp, ref, "k1"), torch.tensor([[-ln2, 0.0]]))
    torch.testing.assert_close(grpo.kl_estimate(logp, ref, "abs"), torch.tensor([[ln2, 0.0]]))
    torch.testing.assert_close(
        grpo.kl_estimate(logp, ref, "k2"), torch.tensor([[0.5 * ln2**2, 0.0]])
    )
    # k3 stays finite and bounded for a collapsed token.
    extreme = grpo.kl_estimate(torch.tensor([[-100.0]]), torch.tensor([[0.0]]), "k3")
    assert float(extreme) == 10.0


def test_policy_loss_adds_kl_and_reports_metrics():
    old = torch.zeros(2, 3)
    new = torch.log(torch.tensor([[1.5, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    ref = new + torch.tensor([[math.log(2.0), 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    out = policy_losses.policy_loss(new, old, adv, mask, Recipe(kl_loss_coef=0.1), ref_logprobs=ref)
    # Expected policy, token_mean: (-1.2 - 1.0 + 1.0) / 3; KL, sequence mean of k3:
    # ((1 - ln2 + 0) / 2 + 0 / 1) / 2
    pg = (-1.2 - 1.0 + 1.0) / 3
    kl = ((1 - math.log(2.0)) / 2) / 2
    assert out.metrics["loss/policy"] == pytest.approx(pg)
    assert out.metrics["loss/kl"] == pytest.approx(kl)
    assert float(out.loss) == pytest.approx(pg + 0.1 * kl)
    assert out.metrics["loss/clip_fraction"] == pytest.approx(1 / 3)
    assert out.metrics["loss/ratio_mean"] == pytest.approx((1.5 + 1 + 1) / 3)


def test_policy_loss_refuses_kl_without_reference():
    z = torch.zeros(1, 2)
    with pytest.raises(UsageError, match="ref_logprobs"):
        policy_losses.policy_loss(z, z, torch.ones(1), torch.ones(1, 2), Recipe(kl_loss_coef=0.1))


def test_kl_term_is_a_token_mean_per_episode_averaged_over_episodes():
    # Three turn rows: episode 0 has two turns of one token each, episode 1 one turn of two.
    # With k1 and a zero reference, the KL tokens are the logprobs themselves.
    kl = torch.tensor([[1.0, 0.0], [3.0, 0.0], [2.0, 4.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    ids = torch.tensor([0, 0, 1])
    z = torch.zeros(3)
    k1 = replace(PLAIN, kl_estimator_type="k1")
    out = policy_losses.policy_loss(
        kl, kl, z, mask, k1, seq_ids=ids, ref_logprobs=torch.zeros(3, 2)
    )
    # Expected per episode: ((1 + 3) / 2 + (2 + 4) / 2) / 2 = 2.5; per row it was
    # (1 + 3 + 3) / 3 = 2.33, the two-turn episode counted twice.
    assert out.metrics["loss/kl"] == pytest.approx(2.5)
    assert float(grpo.episode_mean(kl, mask)) == pytest.approx(7 / 3)


def test_dual_clip_and_gspo_by_hand():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[2.0, 0.0]])  # token ratios e^2 and 1
    mask = torch.ones(1, 2)
    adv = torch.tensor([-1.0])
    seq = replace(PLAIN, loss_reduction="sequence_mean")
    regular = policy_losses.policy_loss(logp, old, adv, mask, seq)
    dual = policy_losses.policy_loss(
        logp, old, adv, mask, replace(seq, policy_loss_type="dual_clip")
    )
    # Expected regular: (e^2 + 1) / 2; dual-clip caps the first token at -A * 3 = 3: (3 + 1) / 2
    assert float(regular.loss) == pytest.approx((math.exp(2.0) + 1) / 2)
    assert float(dual.loss) == pytest.approx(2.0)
    gspo_recipe = replace(seq, policy_loss_type="gspo")
    gspo = policy_losses.policy_loss(logp, old, adv, mask, gspo_recipe)
    # Expected GSPO: both tokens take the sequence ratio exp((2 + 0) / 2) = e: loss e for each
    assert float(gspo.loss) == pytest.approx(math.e)
    # with the two tokens as two turn rows of one episode, the same sequence ratio
    rows = policy_losses.policy_loss(
        logp.T,
        old.T,
        torch.tensor([-1.0, -1.0]),
        torch.ones(2, 1),
        gspo_recipe,
        seq_ids=torch.tensor([4, 4]),
    )
    assert float(rows.loss) == pytest.approx(math.e)
    with pytest.raises(UsageError, match="recipe.policy_loss_type 'ppo'"):
        replace(PLAIN, policy_loss_type="ppo")
    with pytest.raises(UsageError, match="unknown policy loss 'cispo'"):  # SkyRL's only
        policy_losses.policy_loss(logp, old, adv, mask, replace(PLAIN, policy_loss_type="cispo"))


def test_entropy_bonus_subtracts_the_token_mean_entropy():
    z = torch.zeros(1, 3)
    entropy = torch.tensor([[1.0, 2.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    bonus = replace(PLAIN, entropy_loss_coef=0.1)
    out = policy_losses.policy_loss(z, z, torch.zeros(1), mask, bonus, entropy=entropy)
    assert float(out.loss) == pytest.approx(-0.1 * 1.5)  # Expected: 0 - 0.1 * (1 + 2) / 2
    with pytest.raises(UsageError, match="entropy"):
        policy_losses.policy_loss(z, z, torch.zeros(1), mask, bonus)
