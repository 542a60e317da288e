"""Loss reductions as per-token weights: how a mini-batch's per-token losses become one number.

`token_mean` (the DAPO/SkyRL default), `sequence_mean` (the textbook 1/G sum 1/|o_i|) and
`seq_mean_token_sum_norm` (Dr. GRPO's constant normaliser), under SkyRL's names (`REDUCTIONS`,
the recipe's `loss_reduction`). Each is written as per-token weights (`reduction_weights`), so
that summing weighted token losses over micro-batches gives the mini-batch reduction exactly,
as SkyRL does by rescaling advantages. A sequence is an episode: rows sharing a `seq_ids` entry
(the local trainer's turn rows) count as one, so both backends' layouts reduce alike.
`episode_mean` is SkyRL's reduction of its KL term. The GRPO loss itself: `rlkit.train.grpo`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlkit.errors import UsageError


def _sequence_tokens(m: torch.Tensor, seq_ids: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """(loss tokens of each row's sequence (B, 1), number of sequences) for mask m (B, T)."""
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


def _token_mean(m: torch.Tensor, seq_ids: torch.Tensor | None, max_seq_len: int | None):
    return m / m.sum().clamp(min=1.0)


def _sequence_mean(m: torch.Tensor, seq_ids: torch.Tensor | None, max_seq_len: int | None):
    tokens, n_seqs = _sequence_tokens(m, seq_ids)
    return m / (n_seqs * tokens.clamp(min=1.0))


def _seq_mean_token_sum_norm(
    m: torch.Tensor, seq_ids: torch.Tensor | None, max_seq_len: int | None
) -> torch.Tensor:
    if max_seq_len is None or max_seq_len < 1:
        raise UsageError(
            f"max_seq_len ({max_seq_len}) must be a positive int for "
            "seq_mean_token_sum_norm: it is the constant token budget per sequence"
        )
    return m / (_sequence_tokens(m, seq_ids)[1] * max_seq_len)


REDUCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "token_mean": _token_mean,
    "sequence_mean": _sequence_mean,
    "seq_mean_token_sum_norm": _seq_mean_token_sum_norm,
}
"""Loss reductions as per-token weight functions, under SkyRL's names (`rlkit.recipe`)."""


def reduction_weights(
    mask: torch.Tensor,
    reduction: str,
    *,
    max_seq_len: int | None = None,
    seq_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token weights w (B, T) such that `(token_loss * w).sum()` is the chosen reduction.

    mask: (B, T), 1 where a token carries loss. seq_ids: (B,) int, rows with the same id are
    parts of one sequence (the turns of one episode); None makes each row its own sequence.
    With m = mask, S the number of sequences and n_i the loss tokens of row i's sequence:
    - token_mean:              w = m / max(1, sum(m))            (seq_ids change nothing)
    - sequence_mean:           w_i = m_i / (S * max(1, n_i))
    - seq_mean_token_sum_norm: w = m / (S * max_seq_len)   (max_seq_len required)
    Compute the weights on the whole optimiser mini-batch, then slice them for micro-batches.
    """
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
    """Reduce a (B, T) per-token loss to a scalar; masked tokens never contribute (even NaN).
    seq_ids (B,): which rows form one sequence (see `reduction_weights`)."""
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
    if dim is None:
        return total.sum() / m.sum().clamp(min=1.0)
    return total.sum(dim=dim) / m.sum(dim=dim).clamp(min=1.0)


def episode_mean(
    values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The token mean of `values` (B, T) within each sequence (rows sharing a `seq_ids` entry:
    the turns of one episode; None: each row), averaged over sequences: SkyRL's reduction of
    its KL term (`masked_mean(kl, mask, dim=-1).mean()` over episode rows)."""
    w = reduction_weights(mask, "sequence_mean", seq_ids=seq_ids).to(values.dtype)
    return torch.where(mask.bool(), values * w, torch.zeros_like(values)).sum()
