"""GRPO math as small, pure tensor functions: advantages, loss reductions, KL, each a registry
under SkyRL's `ppo_utils` names that a `Recipe` switch looks up (`ESTIMATORS`, `REDUCTIONS`,
`KL_ESTIMATORS`). How they differ from the textbook: docs/local-trainer.md."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlkit.errors import UsageError
from rlkit.recipe import Recipe


def _check_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Validate episode-level inputs; return (inverse index into groups, each group's size)."""
    if rewards.ndim != 1 or group_ids.ndim != 1:
        raise UsageError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must be 1-D "
            "(one entry per episode)"
        )
    if rewards.shape != group_ids.shape:
        raise UsageError(
            f"rewards ({rewards.numel()}) and group_ids ({group_ids.numel()}) must have one "
            "entry per episode each"
        )
    if rewards.numel() == 0:
        raise UsageError("rewards is empty: pass at least one group of episodes")
    if not torch.isfinite(rewards).all():
        raise UsageError("rewards contain NaN or inf: check the env's reward before GRPO")
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if int(counts.min()) < 2:
        raise UsageError(
            f"group_size ({int(counts.min())}) must be >= 2: GRPO compares episodes within a group"
        )
    return inverse, counts


def _centred(
    r: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor, norm_by_std: bool, eps: float
) -> torch.Tensor:
    """float64 `r - mean` of its group, or `(r - mean) / (std + eps)` (unbiased std)."""
    n = counts.numel()
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, r)
    centred = r - (sums / counts)[inverse]
    if norm_by_std:
        sq = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, centred**2)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        centred = centred / (std[inverse] + eps)
    return centred


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantage of each episode: rewards (B,) float, group_ids (B,) int (one id
    a maze) -> (B,) `r_i - mean_g`, or with `norm_by_std` `(r_i - mean_g) / (std_g + eps)`."""
    inverse, counts = _check_groups(rewards, group_ids)
    centred = _centred(rewards.detach().double(), inverse, counts, norm_by_std, eps)
    return centred.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def _grpo(rewards: torch.Tensor, group_ids: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    return group_advantages(rewards, group_ids, norm_by_std=recipe.grpo_norm_by_std)


ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor, Recipe], torch.Tensor]] = {
    "grpo": _grpo,
    "gigpo": _grpo,  # its episode level; `step_credit` adds the step level
}
"""Advantage estimators under SkyRL's names: `fn(rewards (B,), group_ids (B,), recipe) -> (B,)`."""


def estimate(rewards: torch.Tensor, group_ids: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Each episode's advantage by the recipe's `advantage_estimator` (B,) -> (B,)."""
    if recipe.advantage_estimator not in ESTIMATORS:
        raise UsageError(
            f"recipe.advantage_estimator {recipe.advantage_estimator!r}: the local trainer has "
            f"{', '.join(ESTIMATORS)}"
        )
    return ESTIMATORS[recipe.advantage_estimator](rewards, group_ids, recipe)


def discounted_returns(rewards: torch.Tensor, lengths: torch.Tensor, gamma: float) -> torch.Tensor:
    """Each turn's discounted return, an episode's one reward at its end: rewards (B,), lengths
    (B,) turns per episode -> (N,) in episode then turn order, turn t of T: gamma**(T-1-t) * r."""
    episode = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    first = torch.cumsum(lengths, 0) - lengths
    to_go = (lengths[episode] - 1 - (torch.arange(episode.numel()) - first[episode])).double()
    return rewards.double()[episode] * gamma**to_go


def anchor_advantages(
    returns: torch.Tensor, anchors: torch.Tensor, *, norm_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GiGPO's step advantage: returns (N,) centred within anchor groups (anchors (N,) or (N, K)
    int, equal rows a group) as `group_advantages`, float64; a turn alone in its group gets 0."""
    keys = anchors.reshape(anchors.shape[0], -1)
    _, inverse, counts = torch.unique(keys, dim=0, return_inverse=True, return_counts=True)
    centred = _centred(returns.double(), inverse, counts, norm_by_std, eps)
    return torch.where(counts[inverse] > 1, centred, torch.zeros_like(centred))


def step_credit(
    episode_adv: torch.Tensor,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    lengths: torch.Tensor,
    states: torch.Tensor,
    recipe: Recipe,
) -> torch.Tensor:
    """GiGPO's per-turn advantage A_episode + gigpo_step_weight * A_step (arXiv 2505.10978), the
    anchor group a maze group's turns on one state: (B,) episode inputs, states (N,) or (N, K)
    int keys in episode then turn order -> (N,) float32."""
    episode = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    if states.shape[0] != episode.numel():
        raise UsageError(
            f"states ({states.shape[0]}) must have one row per turn ({episode.numel()})"
        )
    keys = states.reshape(episode.numel(), -1).long()
    anchors = torch.cat([group_ids.long()[episode].unsqueeze(-1), keys], dim=-1)
    returns = discounted_returns(rewards, lengths, recipe.gigpo_gamma)
    step = anchor_advantages(returns, anchors, norm_by_std=recipe.grpo_norm_by_std)
    return (episode_adv.double()[episode] + recipe.gigpo_step_weight * step).float()


def nonzero_variance_mask(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, tol: float = 1e-6
) -> torch.Tensor:
    """(B,) bool: the episode's group has rewards that differ (max - min > tol)."""
    if tol < 0:
        raise UsageError(f"tol ({tol}) must be >= 0: it is the reward spread treated as equal")
    hi, lo, inverse = _group_range(rewards, group_ids)
    return ((hi - lo) > tol)[inverse]


def unsolved_group_mask(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B,) bool: no episode of the episode's group scored (every reward <= 0)."""
    hi, _, inverse = _group_range(rewards, group_ids)
    return (hi <= 0)[inverse]


def _group_range(
    rewards: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group (max, min) of the rewards, and each episode's group position."""
    inverse, counts = _check_groups(rewards, group_ids)
    r, empty = rewards.detach().double(), torch.zeros(counts.numel(), dtype=torch.float64)
    hi = empty.scatter_reduce(0, inverse, r, reduce="amax", include_self=False)
    lo = empty.scatter_reduce(0, inverse, r, reduce="amin", include_self=False)
    return hi, lo, inverse


def sequence_sums(m: torch.Tensor, seq_ids: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """(sum of `m` (B, T) over each row's sequence (B, 1), number of sequences)."""
    if seq_ids is None:
        return m.sum(dim=-1, keepdim=True), m.shape[0]
    if seq_ids.shape != (m.shape[0],):
        raise UsageError(
            f"seq_ids {tuple(seq_ids.shape)} must be ({m.shape[0]},): one sequence id per row"
        )
    _, inverse = torch.unique(seq_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    tokens = torch.zeros(n, dtype=m.dtype, device=m.device).index_add_(0, inverse, m.sum(-1))
    return tokens[inverse].unsqueeze(-1), n


def _sequence_mean(m: torch.Tensor, seq_ids: torch.Tensor | None, max_seq_len: int | None):
    tokens, n_seqs = sequence_sums(m, seq_ids)
    return m / (n_seqs * tokens.clamp(min=1.0))


def _seq_mean_token_sum_norm(
    m: torch.Tensor, seq_ids: torch.Tensor | None, max_seq_len: int | None
) -> torch.Tensor:
    if max_seq_len is None or max_seq_len < 1:
        raise UsageError(
            f"max_seq_len ({max_seq_len}) must be a positive int for "
            "seq_mean_token_sum_norm: it is the constant token budget per sequence"
        )
    return m / (sequence_sums(m, seq_ids)[1] * max_seq_len)


REDUCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "token_mean": lambda m, seq_ids, max_seq_len: m / m.sum().clamp(min=1.0),
    "sequence_mean": _sequence_mean,
    "seq_mean_token_sum_norm": _seq_mean_token_sum_norm,
}
"""Loss reductions as per-token weight functions `fn(mask, seq_ids, max_seq_len) -> (B, T)`."""


def reduction_weights(
    mask: torch.Tensor,
    reduction: str,
    *,
    max_seq_len: int | None = None,
    seq_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token weights w (B, T), `(token_loss * w).sum()` the reduction, for mask (B, T) and
    seq_ids (B,) (rows of one episode; None: each row), S sequences, n_i row i's sequence's
    tokens: token_mean m / sum(m), sequence_mean m_i / (S n_i), seq_mean_token_sum_norm
    m / (S max_seq_len)."""
    m = mask.to(torch.float32) if not mask.is_floating_point() else mask
    if m.ndim != 2:
        raise UsageError(f"mask {tuple(m.shape)} must be (B, T)")
    if reduction not in REDUCTIONS:
        raise UsageError(
            f"unknown loss reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}"
        )
    return REDUCTIONS[reduction](m, seq_ids, max_seq_len)


def reduce_loss(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    reduction: str,
    *,
    max_seq_len: int | None = None,
    seq_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """A (B, T) token loss reduced by `reduction_weights`; masked tokens (even NaN) never count."""
    if token_loss.shape != mask.shape:
        raise UsageError(
            f"token_loss {tuple(token_loss.shape)} and mask {tuple(mask.shape)} must match"
        )
    w = reduction_weights(mask, reduction, max_seq_len=max_seq_len, seq_ids=seq_ids)
    w = w.to(token_loss.dtype)
    return torch.where(mask.bool(), token_loss * w, torch.zeros_like(token_loss)).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is set (0 when nothing is set); same shapes, any rank."""
    m = mask.to(values.dtype)
    total = torch.where(mask.bool(), values * m, torch.zeros_like(values))
    return total.sum(dim=dim) / m.sum(dim=dim).clamp(min=1.0)


def episode_mean(
    values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The token mean of `values` (B, T) within each sequence (`seq_ids`; None: each row),
    averaged over sequences: SkyRL's reduction of its KL term."""
    return reduce_loss(values, mask, "sequence_mean", seq_ids=seq_ids)


def _k3(delta: torch.Tensor) -> torch.Tensor:
    d = delta.clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "k1": lambda d: -d,
    "abs": lambda d: d.abs(),
    "k2": lambda d: 0.5 * d.square(),
    "k3": _k3,
}
"""KL(pi || pi_ref) per token from d = ref_logprobs - logprobs (k1 -d, abs |d|, k2 d^2 / 2)."""


def kl_estimate(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) from sampled-token logprobs (B, T) -> (B, T), as SkyRL: k3
    = exp(d) - d - 1 with d = ref_logprobs - logprobs clamped to [-20, 20], then to [-10, 10]."""
    if logprobs.shape != ref_logprobs.shape:
        raise UsageError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} "
            "must have the same shape"
        )
    if estimator not in KL_ESTIMATORS:
        raise UsageError(
            f"unknown KL estimator {estimator!r}: choose one of {', '.join(KL_ESTIMATORS)}"
        )
    return KL_ESTIMATORS[estimator](ref_logprobs - logprobs)
