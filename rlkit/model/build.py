"""Build the tiny Qwen3-VL offline (~0.7 M parameters) as an HF model dir vLLM serves as it is
(`rlkit model tiny --out models/tiny`), with a byte-level BPE trained on the env's own texts:
docs/models-and-engines.md#the-tiny-models-tokenizer-modelbuildpy."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from rlkit.env.maze_env import EnvConfig, MazeEnv, observation_message, system_prompt
from rlkit.maze import rules
from rlkit.maze.core import Action
from rlkit.maze.generation import generate
from rlkit.maze.parsing import format_action
from rlkit.maze.render import to_ascii
from rlkit.model.config import SPECIAL_TOKENS, TinyConfig
from rlkit.model.load import no_progress_bars

ANSWER_TOKENS = ("<action>", "</action>", *(a.word for a in Action))
"""Added as whole tokens: the constrained sampler chooses among the move-word tokens only."""

# Qwen's template, reduced to what the env sends: each `image_url` or `image` part becomes
# vision_start + image_pad + vision_end (the encoder expands the pad, as Qwen's processor does).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- elif part['type'] in ('image', 'image_url') -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

_BAD_ANSWERS = (
    "",
    "hello",
    "<action></action>",
    "<action>jump</action>",
    "<action>up, left</action>",
    "<action>up</action><action>up</action>",
)


def corpus() -> list[str]:
    """Every text the env can show or expect, over its prompt styles and observation modes."""
    maze = generate(3, 3, 0)
    # Roles and answers recur every turn: weight them so each becomes one or two tokens.
    texts = [format_action(a) for a in Action] * 16 + ["system\n", "user\n", "assistant\n"] * 64
    for style, obs in itertools.product(("compact", "full"), ("image", "text", "both")):
        cfg = EnvConfig(observation=obs, prompt_style=style)
        for moves, max_turns in itertools.product((1, 2, 3), (12, 18, 24)):
            texts.append(system_prompt(replace(cfg, max_turns=max_turns, moves_per_turn=moves)))
        state = rules.initial(maze)
        for turn in range(cfg.max_turns):
            texts += _texts_of(observation_message(replace(state, turns=turn), cfg))
        for parser in ("strict", "relaxed"):
            env = MazeEnv(replace(cfg, parser=parser), {"maze": maze})
            env.init()
            for bad in _BAD_ANSWERS:
                for m in env.step(bad)["observations"]:
                    texts += _texts_of(m)
    texts.append(to_ascii(rules.initial(generate(6, 6, 1))))
    return texts


def _texts_of(message: dict) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if p.get("type") == "text"]


def build_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE (milliseconds) and wrap it as an HF fast tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=32768,
    )
    fast.add_tokens(list(ANSWER_TOKENS))
    for word in ANSWER_TOKENS:
        if len(fast(word)["input_ids"]) != 1:
            raise RuntimeError(f"tokenizer split {word!r}: the constrained answer needs it whole")
    return fast


def hf_config(
    cfg: TinyConfig,
    vocab: int,
    ids: dict[str, int],
    *,
    max_positions: int = 4096,
    rope_theta: float = 10000.0,
    vision_positions: int = 256,
    bos_id: int | None = None,
) -> Qwen3VLConfig:
    """The Qwen3-VL config of `cfg` with `vocab` embedding rows and the special tokens' `ids`."""
    return Qwen3VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": cfg.hidden,
            "intermediate_size": cfg.intermediate,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "max_position_embeddings": max_positions,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": rope_theta,
                "mrope_section": list(cfg.mrope_section),
                "mrope_interleaved": True,
            },
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "bos_token_id": bos_id,
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
            "num_position_embeddings": vision_positions,
            "deepstack_visual_indexes": list(cfg.deepstack),
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=cfg.tie_word_embeddings,
    )


def build_tiny(out_dir: str | Path, *, seed: int = 0, config: TinyConfig | None = None) -> Path:
    """Build, randomly initialise (seeded; the caller's torch RNG untouched) and save the tiny
    Qwen3-VL with its tokenizer."""
    cfg = config or TinyConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(cfg.vocab_size)
    with torch.random.fork_rng(devices=[]):  # CPU only: the model is built on the CPU
        torch.default_generator.manual_seed(seed)
        ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
        model = Qwen3VLForConditionalGeneration(hf_config(cfg, len(tok), ids))
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
