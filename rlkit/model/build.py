"""Build the tiny Qwen3-VL offline (~0.7 M parameters, its own BPE tokenizer) as a normal HF
model directory that vLLM serves as it is: `rlkit model tiny --out models/tiny`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)

from rlkit.model.config import TinyConfig
from rlkit.model.load import no_progress_bars


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
        tie_word_embeddings=cfg.tie_word_embeddings,
    )


def build_tiny(out_dir: str | Path, *, seed: int = 0, config: TinyConfig | None = None) -> Path:
    """Build, randomly initialise (seeded, inside `fork_rng`: the caller's torch RNG is left as
    it was) and save the tiny Qwen3-VL with its tokenizer."""
    from rlkit.model.tokenizer import build_tokenizer  # training the BPE imports the env's texts

    cfg = config or TinyConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(cfg.vocab_size)
    with torch.random.fork_rng(devices=[]):  # CPU only: the model is built on the CPU
        torch.default_generator.manual_seed(seed)
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
