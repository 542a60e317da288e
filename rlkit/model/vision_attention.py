"""Batched vision attention for many same-sized images (a registered transformers attention).

Qwen3-VL's vision tower packs every image of a batch into one sequence and, unless a flash
kernel is installed, runs attention image by image in a Python loop: with 256 maze pictures
per rollout turn that loop, not the math, dominates a CPU step. When every image has the same
patch count (always true here: one render size), the packed sequence reshapes into a batch and
one `scaled_dot_product_attention` call does the same computation. Mixed sizes fall back to the
per-image loop, so results never depend on which path ran.

The function is registered under a name containing "flash" because that is how the vision
attention decides to hand over the packing boundaries (`cu_seqlens`); only the vision config
uses it, the text model keeps its own implementation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

NAME = "rlkit_flash_uniform_sdpa"


def uniform_varlen_attention(
    module,
    query,
    key,
    value,
    attention_mask=None,
    *,
    scaling=None,
    dropout=0.0,
    cu_seq_lens_q=None,
    **kwargs,
):
    """(1, heads, total, d) packed q/k/v -> ((1, total, heads, d), None), block-diagonal."""
    _, heads, total, dim = query.shape
    cu = cu_seq_lens_q if cu_seq_lens_q is not None else torch.tensor([0, total])
    lengths = (cu[1:] - cu[:-1]).tolist()
    if len(set(lengths)) == 1:
        n, length = len(lengths), lengths[0]

        def split(t: torch.Tensor) -> torch.Tensor:
            return t[0].view(heads, n, length, dim).transpose(0, 1)

        out = F.scaled_dot_product_attention(
            split(query), split(key), split(value), dropout_p=dropout, scale=scaling
        )  # (n, h, L, d)
        return out.permute(0, 2, 1, 3).reshape(1, total, heads, dim), None
    outs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)
        for q, k, v in zip(
            *(torch.split(t, lengths, dim=2) for t in (query, key, value)), strict=True
        )
    ]
    return torch.cat(outs, dim=2).transpose(1, 2), None


AttentionInterface.register(NAME, uniform_varlen_attention)


def use_uniform_vision_attention(model) -> None:
    """Switch a loaded Qwen3-VL's vision tower to the batched attention (CPU/no-flash boxes)."""
    vision_cfg = model.config.vision_config
    if "flash" not in (vision_cfg._attn_implementation or ""):
        vision_cfg._attn_implementation = NAME
