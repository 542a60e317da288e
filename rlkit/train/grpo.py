"""GRPO math as small, pure tensor functions: clipped loss, KL, masks (the reductions: `reductions`).

The local trainer calls these; the cluster backend (SkyRL) has its own copy of the same math, and
these functions follow SkyRL's definitions (`skyrl/backends/skyrl_train/utils/ppo_utils.py`) so
that, with the same settings, a local run and a cluster run optimise the same objective.
`tests/skyrl/test_objective.py` checks them against SkyRL's own code.

Textbook GRPO (Shao et al. 2024, DeepSeekMath), for G episodes o_1..o_G of one prompt (one maze)
with outcome rewards r_1..r_G and the importance ratio rho_it = pi(o_it) / pi_old(o_it)::

    A_i  = (r_i - mean(r)) / std(r)
    J    = 1/G sum_i 1/|o_i| sum_t [ min(rho_it A_i, clip(rho_it, 1-eps, 1+eps) A_i)
                                     - beta KL_k3(pi || pi_ref)_it ]

How ours differs, each switchable:

- **Advantages are group-relative, the std division optional**: `rlkit.train.advantages`
  (with the zero-variance and all-failed group masks, and how they differ from SkyRL's).
- **Clip-higher** (DAPO, Yu et al. 2025): separate `eps_clip_low` / `eps_clip_high`, so rare good
  moves can gain probability faster than the symmetric clip allows.
- **Loss reduction is a choice** (`token_mean`, the DAPO/SkyRL default; `sequence_mean`, the
  textbook 1/G sum 1/|o_i|; `seq_mean_token_sum_norm`, Dr. GRPO's constant normaliser). All are
  written as per-token weights (`rlkit.train.reductions`) so that summing weighted token losses over
  micro-batches gives the mini-batch reduction exactly, as SkyRL does by rescaling advantages.
- **KL to a reference policy is a separate, optional term** (`kl_loss_coef`), estimator `k3`, `k1`,
  `k2` or `abs` (Schulman, "Approximating KL divergence"), reduced as a per-sequence token mean
  averaged over sequences, like SkyRL's `use_kl_loss`; a sequence is an episode (`seq_ids`), so
  a long episode weighs as much as a short one on both backends.
- **The policy loss is a registry** (`POLICY_LOSSES`, SkyRL's names): `regular` (the clipped
  surrogate above), `dual_clip` and `gspo` (one ratio per episode); likewise the reductions
  (`reductions.REDUCTIONS`) and KL estimators (`KL_ESTIMATORS`). `rlkit.recipe` names the switches.
- **Entropy bonus** (`entropy_coef`): minus the token-mean entropy of the mini-batch, as SkyRL's
  `use_entropy_loss` per micro-batch (equal when a mini-batch is one micro-batch).
- **Multi-turn**: one outcome reward per episode; its advantage is broadcast to every token the
  model produced in the episode. Observation tokens (env feedback, images) are masked out
  (`multiturn_loss_mask`). A sequence is an episode: SkyRL trains one row per episode, the
  local trainer one row per turn and passes each row's episode as `seq_ids`, so all three
  reductions give the same number for either layout (`sequence_mean` is then 1/G sum_i 1/|o_i|
  over episodes, even with one answer token per turn). `token_mean` counts tokens and needs no
  ids; without ids, `sequence_mean` and `seq_mean_token_sum_norm` count rows.

Where this differs from SkyRL (each shown by a test):

- **GSPO's sequence ratio spans the episode's turn rows** (`seq_ids`): SkyRL's row is the whole
  episode, so the two agree; without ids each row is a sequence.
- **No `token_mean_legacy` and no `prompt_mean` reduction.** `token_mean_legacy` (SkyRL's
  visgym recipe's; the cluster preset runs `token_mean` instead, this trainer's default) takes the token mean of each micro-batch (`micro_train_batch_size_per_gpu`
  consecutive sequences of the mini-batch) and averages those means with equal weight. It is
  `token_mean` only when every micro-batch holds as many loss tokens (or there is one), and
  `sequence_mean` when each holds one sequence. Two micro-batches with 5 and 4 loss tokens whose
  losses sum to 8 and 4 give (8/5 + 4/4) / 2 = 1.3, where `token_mean` gives 12/9.
- **Masked tokens never reach the sum, even NaN.** SkyRL's `reduce_loss` multiplies by the mask,
  so a NaN at a padded position makes its whole loss NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train.reductions import episode_mean, masked_mean, reduce_loss


def _as_token_tensor(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast episode advantages (B,) to tokens (B, T); pass (B, T) through."""
    if advantages.ndim == 1 and like.ndim == 2 and advantages.shape[0] == like.shape[0]:
        return advantages.unsqueeze(-1).expand_as(like)
    if advantages.shape != like.shape:
        raise UsageError(
            f"advantages {tuple(advantages.shape)} must be (B,) or match logprobs "
            f"{tuple(like.shape)}"
        )
    return advantages


def _check_clip(eps_clip_low: float, eps_clip_high: float) -> None:
    if eps_clip_low < 0 or eps_clip_high < 0 or eps_clip_low >= 1:
        raise UsageError(
            f"eps_clip_low ({eps_clip_low}) must be in [0, 1) and eps_clip_high ({eps_clip_high})"
            " >= 0: they bound the ratio to [1-low, 1+high]"
        )


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_clip_low: float = 0.2,
    eps_clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate loss (to minimise), with clip-higher.

    logprobs, old_logprobs: (B, T) log pi(token) under the current / rollout-time policy.
    advantages: (B,) per episode or (B, T) per token. Returns `(loss, clipped)`, both (B, T):
    `loss = -min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)` and `clipped` marks tokens where
    the clipped branch was taken (its gradient is zero there).
    """
    _check_clip(eps_clip_low, eps_clip_high)
    if logprobs.shape != old_logprobs.shape:
        raise UsageError(
            f"logprobs {tuple(logprobs.shape)} and old_logprobs {tuple(old_logprobs.shape)} "
            "must have the same shape"
        )
    adv = _as_token_tensor(advantages, logprobs).to(logprobs.dtype)
    # Clamping the log-ratio keeps exp finite for tokens whose probability collapsed.
    ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - eps_clip_low, 1.0 + eps_clip_high) * adv
    return -torch.min(surr, surr_clipped), surr_clipped < surr


def _k3(delta: torch.Tensor) -> torch.Tensor:
    d = delta.clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "k1": lambda d: -d,
    "abs": lambda d: d.abs(),
    "k2": lambda d: 0.5 * d.square(),
    "k3": _k3,
}
"""KL(pi || pi_ref) per token from d = ref_logprobs - logprobs, under SkyRL's names."""


def kl_estimate(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token logprobs; shapes (B, T) -> (B, T).

    With d = ref_logprobs - logprobs: k1 = -d, abs = |d|, k2 = d^2 / 2, k3 = exp(d) - d - 1
    (unbiased and always >= 0). k3 clamps d to [-20, 20] and the result to [-10, 10], as SkyRL.
    """
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


def _regular(logprobs, old_logprobs, adv, mask, seq_ids, params) -> tuple:
    """PPO's clipped surrogate per token (SkyRL `regular`)."""
    return clipped_surrogate(
        logprobs, old_logprobs, adv, eps_clip_low=params[0], eps_clip_high=params[1]
    )


def _dual_clip(logprobs, old_logprobs, adv, mask, seq_ids, params) -> tuple:
    """Dual-clip PPO (Ye et al. 2020): a negative-advantage token's loss is at most -A * c."""
    loss, clipped = _regular(logprobs, old_logprobs, adv, mask, seq_ids, params)
    capped = torch.min(-adv * params[2], loss)
    return torch.where(adv < 0, capped, loss), clipped


def _gspo(logprobs, old_logprobs, adv, mask, seq_ids, params) -> tuple:
    """GSPO-token (Zheng et al. 2025, eqs. 14-15): every token of a sequence takes the
    sequence's ratio, the geometric mean of its token ratios, with the token's own gradient."""
    m = mask.to(logprobs.dtype)
    log_ratio = torch.where(mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))
    if seq_ids is None:
        seq_ids = torch.arange(logprobs.shape[0], device=logprobs.device)
    _, inverse = torch.unique(seq_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    zeros = torch.zeros(n, dtype=logprobs.dtype, device=logprobs.device)
    sums = zeros.index_add(0, inverse, (log_ratio * m).sum(-1))
    counts = zeros.index_add(0, inverse, m.sum(-1))
    seq_log_ratio = (sums / counts.clamp(min=1.0))[inverse].unsqueeze(-1)
    log_w = torch.clamp(logprobs - logprobs.detach() + seq_log_ratio.detach(), max=10.0)
    ratio = torch.exp(log_w)
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - params[0], 1.0 + params[1]) * adv
    return -torch.min(surr, surr_clipped), surr_clipped < surr


POLICY_LOSSES: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "regular": _regular,
    "dual_clip": _dual_clip,
    "gspo": _gspo,
}
"""Per-token policy losses under SkyRL's names: `fn(logprobs, old_logprobs, advantages (B, T),
mask, seq_ids, (eps_clip_low, eps_clip_high, clip_ratio_c)) -> (loss, clipped)`, each (B, T)."""


@dataclass(frozen=True)
class PolicyLoss:
    """The scalar to backpropagate and detached metrics named for the `loss/` log prefix."""

    loss: torch.Tensor
    metrics: dict[str, float]


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_clip_low: float = 0.2,
    eps_clip_high: float = 0.2,
    reduction: str = "token_mean",
    max_seq_len: int | None = None,
    seq_ids: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    policy_loss_type: str = "regular",
    clip_ratio_c: float = 3.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> PolicyLoss:
    """GRPO loss for one mini-batch: the reduced policy loss + kl_coef * KL to the reference
    - entropy_coef * entropy (the names of `recipe_loss`'s `Recipe`, in the local spelling).

    logprobs, old_logprobs, mask, ref_logprobs, entropy: (B, T); advantages: (B,) or (B, T);
    seq_ids: (B,) which rows form one sequence (an episode) in the reduction, the KL term and
    GSPO's ratio (None: each row). Metrics: loss/total, loss/policy, loss/kl (when a reference
    is given), loss/clip_fraction, loss/ratio_mean, loss/approx_kl_old (k3 of the rollout
    policy against the current one).
    """
    if kl_coef < 0 or entropy_coef < 0:
        raise UsageError(f"kl_coef ({kl_coef}) and entropy_coef ({entropy_coef}) must be >= 0")
    if kl_coef > 0 and ref_logprobs is None:
        raise UsageError(f"kl_coef ({kl_coef}) > 0 needs ref_logprobs from the reference policy")
    if entropy_coef > 0 and entropy is None:
        raise UsageError(f"entropy_coef ({entropy_coef}) > 0 needs the policy's entropy")
    if mask.shape != logprobs.shape:
        raise UsageError(f"mask {tuple(mask.shape)} must match logprobs {tuple(logprobs.shape)}")
    if policy_loss_type not in POLICY_LOSSES:
        raise UsageError(
            f"unknown policy loss {policy_loss_type!r}: choose one of {', '.join(POLICY_LOSSES)}"
        )
    adv = _as_token_tensor(advantages, logprobs).to(logprobs.dtype)
    params = (eps_clip_low, eps_clip_high, clip_ratio_c)
    _check_clip(eps_clip_low, eps_clip_high)
    token_loss, clipped = POLICY_LOSSES[policy_loss_type](
        logprobs, old_logprobs, adv, mask, seq_ids, params
    )
    pg = reduce_loss(token_loss, mask, reduction, max_seq_len=max_seq_len, seq_ids=seq_ids)
    total = pg
    with torch.no_grad():
        ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))
        metrics = {
            "loss/policy": float(pg),
            "loss/clip_fraction": float(masked_mean(clipped.to(logprobs.dtype), mask)),
            "loss/ratio_mean": float(masked_mean(ratio, mask)),
            "loss/approx_kl_old": float(masked_mean(kl_estimate(logprobs, old_logprobs), mask)),
        }
    if ref_logprobs is not None:
        kl = episode_mean(kl_estimate(logprobs, ref_logprobs, kl_estimator), mask, seq_ids)
        metrics["loss/kl"] = float(kl.detach())
        if kl_coef > 0:
            total = total + kl_coef * kl
    if entropy_coef > 0:
        total = total - entropy_coef * masked_mean(entropy, mask)
    metrics["loss/total"] = float(total.detach())
    return PolicyLoss(loss=total, metrics=metrics)


def recipe_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    recipe: Recipe,
    *,
    seq_ids: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> PolicyLoss:
    """`policy_loss` with every switch taken from `recipe` (the local trainer's call)."""
    return policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        eps_clip_low=recipe.eps_clip_low,
        eps_clip_high=recipe.eps_clip_high,
        reduction=recipe.loss_reduction,
        max_seq_len=recipe.max_seq_len,
        seq_ids=seq_ids,
        ref_logprobs=ref_logprobs,
        kl_coef=recipe.kl_in_loss,
        kl_estimator=recipe.kl_estimator_type,
        policy_loss_type=recipe.policy_loss_type,
        clip_ratio_c=recipe.clip_ratio_c,
        entropy=entropy,
        entropy_coef=recipe.entropy_loss_coef,
    )


def multiturn_loss_mask(
    episodes: Sequence[Sequence[tuple[int, bool]]], *, seq_len: int | None = None
) -> torch.Tensor:
    """Loss mask for multi-turn token sequences, right-padded: (B, T) float.

    episodes[i] lists the segments of sequence i in order as `(n_tokens, is_model)`: the prompt
    and every observation are `is_model=False`, each of the model's replies `True`. Only the
    model's own tokens get 1. The mask is aligned with the tokens themselves; for logprobs
    computed from logits[:, :-1] predicting tokens[:, 1:], use `mask[:, 1:]`.
    """
    lengths = []
    for i, segments in enumerate(episodes):
        for n, _ in segments:
            if n < 0:
                raise UsageError(f"episode {i} has a segment of {n} tokens: lengths must be >= 0")
        lengths.append(sum(n for n, _ in segments))
    width = max(lengths, default=0) if seq_len is None else seq_len
    if lengths and max(lengths) > width:
        raise UsageError(
            f"an episode has {max(lengths)} tokens but seq_len is {width}: raise seq_len or "
            "truncate the episode"
        )
    mask = torch.zeros((len(lengths), width), dtype=torch.float32)
    for i, segments in enumerate(episodes):
        pos = 0
        for n, is_model in segments:
            if is_model:
                mask[i, pos : pos + n] = 1.0
            pos += n
    return mask


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target token: logits (B, T, V), targets (B, T) int -> (B, T).

    logits[:, t] must already be the distribution that predicts targets[:, t] (shift first).
    Computed in float32 so that bf16 logits give the same numbers as the rollout's.
    """
    if logits.shape[:-1] != targets.shape:
        raise UsageError(
            f"logits {tuple(logits.shape)} must be targets {tuple(targets.shape)} plus a vocab axis"
        )
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution over the last axis: (..., V) -> (...), in nats."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
