"""The vision patch embedding as one matrix product (same weights, same checkpoints).

Qwen3-VL embeds each patch with a `Conv3d` whose kernel equals its stride and its input: every
patch is one window, so the convolution is a linear map of the flattened patch. CPU conv3d
kernels are slow at this shape (forward+backward of 18k patches: 70 ms as a conv, 17 ms as
`F.linear`, here), and the maze pictures of a rollout turn are tens of thousands of patches.

`use_linear_patch_embed` switches a loaded model's embedding class in place: the module keeps
its `proj` parameter, so state dicts, saving, loading and optimizers see no difference. The
class, not a bound method, is swapped so that a deep copy (the KL reference) stays linear with
its own weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionPatchEmbed


class LinearPatchEmbed(Qwen3VLVisionPatchEmbed):
    """`Qwen3VLVisionPatchEmbed` computed as `F.linear` on the conv's flattened weight."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight  # (embed, channels, t, p, p): one output per whole patch
        flat = hidden_states.to(dtype=w.dtype).reshape(-1, w[0].numel())
        return F.linear(flat, w.reshape(w.shape[0], -1), self.proj.bias)


def use_linear_patch_embed(model) -> None:
    """Compute a loaded Qwen3-VL's patch embedding as a matrix product (idempotent)."""
    embed = model.model.visual.patch_embed
    if isinstance(embed, Qwen3VLVisionPatchEmbed) and _kernel_is_stride(embed.proj):
        embed.__class__ = LinearPatchEmbed


def _kernel_is_stride(conv: torch.nn.Conv3d) -> bool:
    """Whether each output of `conv` sees exactly one non-overlapping window, no padding."""
    return (
        tuple(conv.kernel_size) == tuple(conv.stride)
        and all(p == 0 for p in conv.padding)
        and all(d == 1 for d in conv.dilation)
        and conv.groups == 1
    )
