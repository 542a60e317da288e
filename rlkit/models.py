"""Qwen3-VL models: build the tiny offline one, load any checkpoint dir.

`build_tiny(dir)` makes a ~0.7 M-parameter `Qwen3VLForConditionalGeneration` from a config (no
download) with its own byte-level BPE tokenizer (`rlkit.tokenizer`) and a Qwen2-VL image processor config,
saved as a normal HF model directory (vLLM serves it as it is). `load(dir)` reads that directory or a real Qwen3-VL
checkpoint (e.g. Qwen3-VL-8B-Instruct on a GPU machine) through the same code path, and attaches
the one formatting path (`rlkit.chat.ChatEncoder`): env messages -> model inputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoProcessor,
    BaseImageProcessor,
    PreTrainedTokenizerBase,
    ProcessorMixin,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.utils import logging as hf_logging

from rlkit.chat import ChatEncoder, Encoded, LruCache
from rlkit.errors import UsageError
from rlkit.fastattn import use_uniform_vision_attention

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

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise UsageError(
                f"mrope_section {self.mrope_section} must sum to head_dim/2 ({self.head_dim // 2})"
            )
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )


@dataclass
class LoadedModel:
    """Everything needed to run a Qwen3-VL checkpoint on env messages."""

    model: Qwen3VLForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    image_processor: BaseImageProcessor
    processor: ProcessorMixin
    """The checkpoint's own `AutoProcessor` (tokenizer + image processor + chat template)."""
    path: Path
    encoder: ChatEncoder = field(init=False)
    positions: LruCache = field(init=False)
    """Multimodal rope positions per distinct (prompt ids, image grids): a handful of distinct
    prompts per run, while the model's own computation is a Python loop per row."""

    def __post_init__(self) -> None:
        self.encoder = ChatEncoder(self.processor)
        self.positions = LruCache(4096)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(
            pad if pad is not None else self.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        )


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers draws a bar per save/load; in CLI output and notebooks it is noise."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def _hf_config(cfg: TinyConfig, vocab: int, tok: PreTrainedTokenizerBase) -> Qwen3VLConfig:
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    return Qwen3VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": cfg.hidden,
            "intermediate_size": cfg.intermediate,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": list(cfg.mrope_section),
                "mrope_interleaved": True,
            },
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": cfg.vision_depth,
            "hidden_size": cfg.vision_hidden,
            "intermediate_size": cfg.vision_hidden * 2,
            "num_heads": cfg.vision_heads,
            "patch_size": cfg.patch_size,
            "spatial_merge_size": cfg.merge,
            "temporal_patch_size": 2,
            "out_hidden_size": cfg.hidden,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": list(cfg.deepstack),
        },
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )


def build_tiny(out_dir: str | Path, *, seed: int = 0, config: TinyConfig | None = None) -> Path:
    """Build, randomly initialise (seeded) and save the tiny Qwen3-VL with its tokenizer."""
    from rlkit.tokenizer import build_tokenizer  # training the BPE imports the env's texts

    cfg = config or TinyConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(cfg.vocab_size)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(_hf_config(cfg, len(tok), tok))
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.pad_token_id = tok.pad_token_id
    with no_progress_bars():
        model.save_pretrained(out)
    tok.save_pretrained(out)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=cfg.patch_size,
        merge_size=cfg.merge,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": (cfg.patch_size * cfg.merge) ** 2, "longest_edge": cfg.max_image_px},
    )
    image_processor.save_pretrained(out)
    (out / "rlkit_tiny.json").write_text(json.dumps({"seed": seed, **asdict(cfg)}, indent=1))
    return out


def check_checkpoint(path: str | Path) -> Path:
    """`path` as a Path if it holds a Qwen3-VL checkpoint, else a one-line UsageError."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UsageError(
            f"{p} is not a model directory (no config.json): build one with `rlkit model tiny --out DIR`"
        )
    model_type = json.loads(cfg_file.read_text()).get("model_type")
    if model_type is None:
        raise UsageError(f"{p}/config.json names no model_type: not a transformers checkpoint")
    if model_type != MODEL_TYPE:
        raise UsageError(f"{p} holds a {model_type!r} model; rlkit runs Qwen3-VL ({MODEL_TYPE!r})")
    # transformers 5 saves a processor as one processor_config.json; older dirs (and Qwen's
    # published checkpoints) keep the image processor in preprocessor_config.json.
    if not any((p / n).is_file() for n in ("preprocessor_config.json", "processor_config.json")):
        raise UsageError(
            f"{p} has no preprocessor_config.json or processor_config.json: copy the "
            "checkpoint's processor files beside its weights"
        )
    return p


def load(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> LoadedModel:
    """Load a Qwen3-VL checkpoint dir (tiny or real) in eval mode on `device`.

    `dtype` defaults to float32 on CPU (exact logprob checks) and bfloat16 elsewhere.
    """
    p = check_checkpoint(path)
    if dtype is None:
        dtype = torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    with no_progress_bars():
        model = Qwen3VLForConditionalGeneration.from_pretrained(p, dtype=dtype)
    model = model.to(device).eval()
    use_uniform_vision_attention(model)  # one batched call instead of a loop over images
    processor = AutoProcessor.from_pretrained(p)
    tok = processor.tokenizer
    tok.padding_side = "left"  # batched generation appends to the right end of every row
    return LoadedModel(model, tok, processor.image_processor, processor, p)


# Encoded and ChatEncoder live in rlkit.chat; importing them from here keeps working.
__all__ = [
    "MODEL_TYPE",
    "ChatEncoder",
    "Encoded",
    "LoadedModel",
    "TinyConfig",
    "build_tiny",
    "check_checkpoint",
    "load",
]
