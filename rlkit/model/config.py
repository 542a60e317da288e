"""Shape of the tiny offline Qwen3-VL: a torch-free config (train presets and clients read it)."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.errors import UsageError

MODEL_TYPE = "qwen3_vl"

VISION_TOKENS = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""The vision placeholders, never generated: the free distribution excludes them."""
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    *VISION_TOKENS,
)
"""Qwen2/3-VL's special tokens, in Qwen's order (their ids follow the BPE's as one block)."""


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny Qwen3-VL; why: docs/models-and-engines.md#the-tiny-models-shape-modelconfigpy."""

    hidden: int = 128
    """Text width."""
    layers: int = 2
    """Text decoder layers."""
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
    """Vision blocks."""
    vision_hidden: int = 64
    """Vision width; the merger projects it to the text width."""
    vision_heads: int = 4
    """Vision attention heads (head width 16)."""
    patch_size: int = 8
    """Patch side in px (8: one maze cell per patch with the default render style)."""
    merge: int = 2
    """2x2 patches merge into one image token: a 6x6-cell view becomes 9 tokens."""
    deepstack: tuple[int, ...] = (1,)
    """Vision layers whose features are also injected into the text stack (Qwen3-VL deepstack)."""
    vocab_size: int = 512
    """BPE vocabulary before special and answer tokens."""
    max_image_px: int = 1024 * 1024
    """Largest image area before the processor downsizes (full-maze renders stay unscaled)."""
    tie_word_embeddings: bool = True
    """lm_head shares embed_tokens' matrix, as Qwen3-VL-2B's; False: untied, as 8B and up."""

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise UsageError(
                f"mrope_section {self.mrope_section} must sum to head_dim/2 ({self.head_dim // 2})"
            )
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )


FREEZE_VISION = ("none", "tower", "tower+merger")
"""`Tuning.freeze_vision`'s values."""
VISION_PARTS = {
    "tower": r".*visual\.(blocks|patch_embed|pos_embed)(\..*)?",
    "tower+merger": r".*visual(\..*)?",
}
"""Qwen3-VL's module and parameter names (full match) each `freeze_vision` value freezes."""
TEXT_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The text decoder's linear layers, by their Qwen3-VL names."""
VISION_LINEARS = ("qkv", "proj", "linear_fc1", "linear_fc2")
"""The vision tower's and mergers' linear layers (`proj` is also the patch embedding's conv)."""


@dataclass(frozen=True)
class Tuning:
    """Which weights a run trains, on both backends: docs/recipes.md#lora-and-a-frozen-vision-tower."""

    lora_rank: int = 0
    """LoRA rank (SkyRL's `lora.rank`): 0 trains every weight; > 0 only rank-r adapters."""
    lora_alpha: int = 16
    """LoRA scale (SkyRL's `lora.alpha`, its default): an adapter adds alpha / rank x B A."""
    lora_targets: str = "all-linear"
    """Modules that get adapters (SkyRL's `lora.target_modules`): `all-linear` or comma-separated
    Qwen3-VL layer names (`TEXT_LINEARS`, `VISION_LINEARS`)."""
    freeze_vision: str = "none"
    """`none`, `tower` or `tower+merger`: the vision weights that never change."""

    def __post_init__(self) -> None:
        if self.lora_rank < 0:
            raise UsageError(
                f"lora_rank ({self.lora_rank}) must be >= 0 (0: LoRA off, every weight trains)"
            )
        if not self.lora_alpha > 0:
            raise UsageError(f"lora_alpha ({self.lora_alpha}) must be > 0: it scales the adapters")
        if self.freeze_vision not in FREEZE_VISION:
            raise UsageError(
                f"freeze_vision {self.freeze_vision!r}: use one of {', '.join(FREEZE_VISION)}"
            )
        targets = self.target_modules
        if isinstance(targets, list):
            known = TEXT_LINEARS + VISION_LINEARS
            unknown = [n for n in targets if n not in known]
            if unknown or not targets:
                raise UsageError(
                    f"lora_targets {self.lora_targets!r}: {', '.join(unknown) or 'no name'} is not a "
                    f"Qwen3-VL linear layer; use all-linear or names among {', '.join(known)}"
                )
            if self.freeze_vision == "tower+merger" and not set(targets) & set(TEXT_LINEARS):
                raise UsageError(
                    f"lora_targets {self.lora_targets!r} names only vision layers, which "
                    "freeze_vision=tower+merger keeps free of adapters: name a text layer too"
                )

    @property
    def target_modules(self) -> str | list[str]:
        """`lora_targets` as peft's `target_modules`: `all-linear` or a list of names."""
        if self.lora_targets == "all-linear":
            return self.lora_targets
        return [n.strip() for n in self.lora_targets.split(",") if n.strip()]

    @property
    def frozen_pattern(self) -> str | None:
        """The regex (full match) of the frozen vision modules and parameters; None: none."""
        return VISION_PARTS.get(self.freeze_vision)

    def describe(self) -> str:
        """One line: what trains (the dry run's and the trainer's `lora:` line)."""
        frozen = "" if self.freeze_vision == "none" else f", vision {self.freeze_vision} frozen"
        if self.lora_rank == 0:
            return f"off: every {'other ' if frozen else ''}weight trains{frozen}"
        return (
            f"rank {self.lora_rank}, alpha {self.lora_alpha}, targets {self.lora_targets}"
            f"{frozen}; base weights frozen"
        )
