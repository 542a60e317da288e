"""Shape of the tiny offline Qwen3-VL: a torch-free config (train presets and clients read it)."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.errors import UsageError

MODEL_TYPE = "qwen3_vl"


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny local Qwen3-VL (defaults: the shape that learned 3x3 mazes to ~90%
    with a behaviour-cloning warm start and GRPO)."""

    hidden: int = 128
    """Text width: big enough to learn 3x3 mazes, small enough for ~450 turns/s on 2 cores."""
    layers: int = 2
    """Text decoder layers; the policy is mostly a readout of the image tokens."""
    heads: int = 4
    """Query heads (head_dim 32)."""
    kv_heads: int = 2
    """Key/value heads: grouped-query attention as in the real Qwen3-VL."""
    head_dim: int = 32
    """Qwen3-VL's per-head width pattern, scaled down; the rotary sections split it."""
    intermediate: int = 256
    """MLP width (2x hidden)."""
    mrope_section: tuple[int, int, int] = (8, 4, 4)
    """Rotary dims per (time, height, width); sums to head_dim / 2."""
    vision_depth: int = 2
    """Vision blocks: one cell per patch leaves little for a deep vision tower to do."""
    vision_hidden: int = 64
    """Vision width; the merger projects it to the text width."""
    vision_heads: int = 4
    """Vision attention heads (head width 16)."""
    patch_size: int = 8
    """8 px = one maze cell per patch with the default render style (the main learning lever)."""
    merge: int = 2
    """2x2 patches merge into one image token: a 6x6-cell view becomes 9 tokens."""
    deepstack: tuple[int, ...] = (1,)
    """Vision layers whose features are also injected into the text stack (Qwen3-VL deepstack)."""
    vocab_size: int = 512
    """BPE vocabulary before special and answer tokens; the env's texts need few merges."""
    max_image_px: int = 1024 * 1024
    """Largest image area before the processor downsizes (full-maze renders stay unscaled)."""
    tie_word_embeddings: bool = True
    """lm_head shares embed_tokens' matrix, as in Qwen3-VL-2B (the smoke preset's model); False
    builds the untied layout of the larger Qwen3-VL sizes (8B and up)."""

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise UsageError(
                f"mrope_section {self.mrope_section} must sum to head_dim/2 ({self.head_dim // 2})"
            )
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
