"""GRPO's policy losses (`POLICY_LOSSES`, SkyRL's `policy_loss_type` names) and `policy_loss`,
one mini-batch's loss under a `Recipe`; how they differ from SkyRL: docs/local-trainer.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train.grpo import episode_mean, kl_estimate, masked_mean, reduce_loss, sequence_sums


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


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_clip_low: float = 0.2,
    eps_clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss with clip-higher, (B, T) and advantages (B,) or (B, T) -> (loss,
    clipped) (B, T): -min(rho A, clip(rho, 1-low, 1+high) A) and where the clip was taken."""
    if eps_clip_low < 0 or eps_clip_high < 0 or eps_clip_low >= 1:
        raise UsageError(
            f"eps_clip_low ({eps_clip_low}) must be in [0, 1) and eps_clip_high ({eps_clip_high})"
            " >= 0: they bound the ratio to [1-low, 1+high]"
        )
    if logprobs.shape != old_logprobs.shape:
        raise UsageError(
            f"logprobs {tuple(logprobs.shape)} and old_logprobs {tuple(old_logprobs.shape)} "
            "must have the same shape"
        )
    adv = _as_token_tensor(advantages, logprobs).to(logprobs.dtype)
    ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))  # exp stays finite
    return _clip(ratio, adv, eps_clip_low, eps_clip_high)


def _clip(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> tuple:
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - low, 1.0 + high) * adv
    return -torch.min(surr, surr_clipped), surr_clipped < surr


def _regular(logprobs, old_logprobs, adv, mask, recipe: Recipe, seq_ids=None) -> tuple:
    """PPO's clipped surrogate per token (SkyRL `regular`)."""
    return clipped_surrogate(
        logprobs,
        old_logprobs,
        adv,
        eps_clip_low=recipe.eps_clip_low,
        eps_clip_high=recipe.eps_clip_high,
    )


def _dual_clip(logprobs, old_logprobs, adv, mask, recipe: Recipe, seq_ids=None) -> tuple:
    """Dual-clip PPO (Ye et al. 2020): a negative-advantage token's loss is at most -A * c."""
    loss, clipped = _regular(logprobs, old_logprobs, adv, mask, recipe)
    capped = torch.min(-adv * recipe.clip_ratio_c, loss)
    return torch.where(adv < 0, capped, loss), clipped


def _gspo(logprobs, old_logprobs, adv, mask, recipe: Recipe, seq_ids=None) -> tuple:
    """GSPO-token (Zheng et al. 2025, eqs. 14-15): every token of a sequence takes the
    sequence's ratio, the geometric mean of its token ratios, with the token's own gradient."""
    m = mask.to(logprobs.dtype)
    log_ratio = torch.where(mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))
    sums, _ = sequence_sums(log_ratio * m, seq_ids)
    tokens, _ = sequence_sums(m, seq_ids)
    seq_log_ratio = sums / tokens.clamp(min=1.0)
    log_w = torch.clamp(logprobs - logprobs.detach() + seq_log_ratio.detach(), max=10.0)
    return _clip(torch.exp(log_w), adv, recipe.eps_clip_low, recipe.eps_clip_high)


POLICY_LOSSES: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "regular": _regular,
    "dual_clip": _dual_clip,
    "gspo": _gspo,
}
"""Per-token policy losses under SkyRL's names: `fn(logprobs, old_logprobs, advantages (B, T),
mask, recipe, seq_ids=None) -> (loss, clipped)`, each (B, T)."""


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
    recipe: Recipe,
    *,
    seq_ids: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> PolicyLoss:
    """One mini-batch's loss: the `policy_loss_type` loss reduced by `loss_reduction`, plus
    `kl_in_loss` * KL to the reference, minus `entropy_loss_coef` * entropy. Tensors (B, T)
    (advantages also (B,)); seq_ids (B,): each row's episode (None: each row its own)."""
    kl_coef, entropy_coef = recipe.kl_in_loss, recipe.entropy_loss_coef
    if kl_coef > 0 and ref_logprobs is None:
        raise UsageError(
            f"recipe.kl_loss_coef ({kl_coef}) > 0 needs ref_logprobs from the reference policy"
        )
    if entropy_coef > 0 and entropy is None:
        raise UsageError(
            f"recipe.entropy_loss_coef ({entropy_coef}) > 0 needs the policy's entropy"
        )
    if mask.shape != logprobs.shape:
        raise UsageError(f"mask {tuple(mask.shape)} must match logprobs {tuple(logprobs.shape)}")
    if recipe.policy_loss_type not in POLICY_LOSSES:
        raise UsageError(
            f"unknown policy loss {recipe.policy_loss_type!r}: the local trainer has "
            f"{', '.join(POLICY_LOSSES)}"
        )
    adv = _as_token_tensor(advantages, logprobs).to(logprobs.dtype)
    token_loss, clipped = POLICY_LOSSES[recipe.policy_loss_type](
        logprobs, old_logprobs, adv, mask, recipe, seq_ids
    )
    pg = reduce_loss(
        token_loss, mask, recipe.loss_reduction, max_seq_len=recipe.max_seq_len, seq_ids=seq_ids
    )
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
        kl_tokens = kl_estimate(logprobs, ref_logprobs, recipe.kl_estimator_type)
        kl = episode_mean(kl_tokens, mask, seq_ids)
        metrics["loss/kl"] = float(kl.detach())
        if kl_coef > 0:
            total = total + kl_coef * kl
    if entropy_coef > 0:
        total = total - entropy_coef * masked_mean(entropy, mask)
    metrics["loss/total"] = float(total.detach())
    return PolicyLoss(loss=total, metrics=metrics)
