"""A fixture checkpoint with Qwen3-VL-8B-Instruct's real text side (its tokenizer rebuilt from the
BPE ranks of `rlkit.model.qwen_files`) on small random weights, in Qwen's published layout:
docs/models-and-engines.md#the-qwen-fixture-checkpoint-modelqwen_fixturepy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers
from tokenizers import AddedToken, processors
from transformers import (
    GenerationConfig,
    Qwen2Tokenizer,
    Qwen3VLForConditionalGeneration,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> char table

from rlkit.model.build import hf_config
from rlkit.model.config import SPECIAL_TOKENS, TinyConfig
from rlkit.model.load import no_progress_bars
from rlkit.model.qwen_files import (
    QWEN_AGENT,
    XINFERENCE,
    QwenTextFiles,
    build_once,
    cache_root,
    qwen_text_files,
    text_dir,
)

TOKENIZER_VERSION = "tokenizer-v1"
"""Cache key of the converted files: bump it when the conversion changes."""
FIRST_ADDED_ID = 151643
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    *((t, True) for t in SPECIAL_TOKENS),
    *(
        (t, False)
        for t in (
            "<tool_call>",
            "</tool_call>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        )
    ),
)
"""(token, special) from id FIRST_ADDED_ID on, in id order, flags as Qwen's tokenizer_config."""
MODEL_MAX_LENGTH = 262144
"""Qwen3-VL's context (its tokenizer_config's model_max_length)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merges (in rank order) that rebuild every multi-byte token from its bytes, one a token:
    docs/decisions.md#models-mazes-and-the-base-modules."""
    out = []
    for token, limit in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, at = limit, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < best:
                    best, at = r, i
            if at < 0:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {limit}) is not the merge of two tokens")
        out.append((parts[0], parts[1]))
    return out


def write_tokenizer_files(out_dir: Path, files: QwenTextFiles) -> None:
    """The four tokenizer files Qwen ships, into `out_dir`, as Qwen publishes them (the chat
    template is in chat_template.json, as in Qwen's VL repos)."""
    ranks = files.ranks()
    table = bytes_to_unicode()

    def spell(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {spell(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [(spell(a), spell(b)) for a, b in merges_from_ranks(ranks)]
    added = {
        FIRST_ADDED_ID + i: AddedToken(t, special=s, normalized=False)
        for i, (t, s) in enumerate(ADDED_TOKENS)
    }
    settings = {
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "unk_token": None,
    }
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        added_tokens_decoder=added,  # added in id order from len(vocab) = 151643 on
        extra_special_tokens=list(SPECIAL_TOKENS[1:]),
        **settings,
    )
    # Qwen's tokenizer.json: a byte-level post-processor that keeps offsets untrimmed
    tok.backend_tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    got = tok.convert_tokens_to_ids([t for t, _ in ADDED_TOKENS])
    if got != list(range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(ADDED_TOKENS))):
        raise RuntimeError(f"Qwen's added tokens landed at {got[:3]}..., not {FIRST_ADDED_ID}...")
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): t.__getstate__() for i, t in added.items()},
        "additional_special_tokens": list(SPECIAL_TOKENS[1:]),
        "tokenizer_class": "Qwen2Tokenizer",
        **settings,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    lines = ["#version: 0.2", *(f"{a} {b}" for a, b in merges)]
    (out_dir / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    tok.backend_tokenizer.save(str(out_dir / TOKENIZER_FILES[0]))  # last: marks the dir done


def qwen_tokenizer_dir(*, download: bool = True) -> Path:
    """The cached dir with Qwen3-VL's four tokenizer files (built on first use, ~3 s)."""
    files = qwen_text_files(download=download)
    key = f"{TOKENIZER_VERSION}-tf{transformers.__version__}"  # its writer's file format
    return build_once(
        text_dir() / key, lambda d: write_tokenizer_files(d, files), marker=TOKENIZER_FILES[0]
    )


FIXTURE_VERSION = "qwen-fixture-v1"
"""Cache key of the builder: bump it when what `build_qwen_fixture` writes changes."""
MARKER = "rlkit_fixture.json"
EMBEDDING_ROWS = 151936
"""Qwen3-VL's embedding rows: 151,669 tokens padded up to a multiple of 128."""
GENERATION = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "top_k": 20,
    "top_p": 0.8,
    "repetition_penalty": 1.05,
    "temperature": 0.7,
}
"""Sampling defaults, each off neutral on purpose: a test catches any leaking into rlkit's sampling."""
_VISION_NUMBERS = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
}
PREPROCESSOR = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    **_VISION_NUMBERS,
    # transformers 5 reads a "...Fast" type as the torchvision backend of Qwen2VLImageProcessor
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
"""preprocessor_config.json as Qwen3-VL's repos publish it."""
VIDEO_PREPROCESSOR = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    **_VISION_NUMBERS,
    "video_processor_type": "Qwen3VLVideoProcessor",
}
"""video_preprocessor_config.json, the processor's third part (AutoProcessor loads it too)."""


FIXTURE_SHAPE = TinyConfig(
    hidden=64,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=32,
    intermediate=128,
    mrope_section=(8, 4, 4),  # Qwen's (24, 20, 20) at a quarter of its head_dim
    vision_depth=2,
    vision_hidden=64,
    vision_heads=4,
    patch_size=16,
    merge=2,
    deepstack=(1,),
    tie_word_embeddings=True,  # halves the 151,936-row matrix on disk
)
"""The fixture's shape, every field written out: the tiny model's defaults may change, this may not
(a change here needs a new `FIXTURE_VERSION`)."""


def build_qwen_fixture(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the fixture checkpoint into `out_dir` (weights seeded by `seed`); ~10 s cold."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = qwen_text_files()
    tok_dir = qwen_tokenizer_dir()
    config = hf_config(  # Qwen3-VL-8B-Instruct's, shrunk: same ids, rope scheme and vocab rows
        FIXTURE_SHAPE,
        EMBEDDING_ROWS,
        {t: FIRST_ADDED_ID + i for i, (t, _) in enumerate(ADDED_TOKENS)},
        max_positions=262144,
        rope_theta=5000000.0,
        vision_positions=2304,  # Qwen's 48 x 48 learned grid, interpolated
        bos_id=GENERATION["bos_token_id"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model = model.to(torch.bfloat16)  # Qwen publishes bfloat16 weights
    model.generation_config = GenerationConfig(**GENERATION)
    with no_progress_bars():
        model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tok_dir / name, out / name)
    _write_json(out / "chat_template.json", {"chat_template": files.chat_template()})
    _write_json(out / "preprocessor_config.json", PREPROCESSOR)
    _write_json(out / "video_preprocessor_config.json", VIDEO_PREPROCESSOR)
    mark = {
        "builder": FIXTURE_VERSION,
        "seed": seed,
        "sources": [QWEN_AGENT, XINFERENCE],
        "transformers": transformers.__version__,
        "note": "Qwen3-VL's text side (tokenizer, template) with tiny random weights",
    }
    _write_json(out / MARKER, mark)  # last: marks a finished build
    return out


def qwen_fixture() -> Path:
    """The fixture dir (seed 0), built once per machine, builder and transformers version."""
    key = f"{FIXTURE_VERSION}-tf{transformers.__version__}-seed0"
    return build_once(cache_root() / "qwen-fixture" / key, build_qwen_fixture, marker=MARKER)


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
