"""Qwen3-VL's real tokenizer, rebuilt offline from the BPE ranks `rlkit.model.qwen_files` fetches:
docs/models-and-engines.md#qwens-tokenizer-rebuilt-modelqwen_vocabpy."""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from tokenizers import AddedToken, processors
from transformers import Qwen2Tokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> char table

from rlkit.model.qwen_files import QwenTextFiles, build_once, qwen_text_files, text_dir

TOKENIZER_VERSION = "tokenizer-v1"
"""Cache key of the converted files: bump it when the conversion or the files written change."""
FIRST_ADDED_ID = 151643
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
"""(token, special) from id FIRST_ADDED_ID on, in id order, flags as Qwen's tokenizer_config."""
MODEL_MAX_LENGTH = 262144
"""Qwen3-VL's context (its tokenizer_config's model_max_length)."""
MARKER = "tokenizer.json"


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merges (in rank order) that rebuild every multi-byte token from its bytes: for a
    token of rank r, BPE over its bytes (lowest-rank join below r first) until two parts remain
    (one merge a token; why: docs/decisions.md#models-mazes-and-the-base-modules)."""
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


def vocab_and_merges(
    ranks: dict[bytes, int],
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """tiktoken ranks -> Hugging Face's byte-level vocab and merges (strings)."""
    table = bytes_to_unicode()

    def spell(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {spell(t): r for t, r in ranks.items()}
    return vocab, [(spell(a), spell(b)) for a, b in merges_from_ranks(ranks)]


def _added_tokens() -> dict[int, AddedToken]:
    return {
        FIRST_ADDED_ID + i: AddedToken(t, special=s, normalized=False)
        for i, (t, s) in enumerate(ADDED_TOKENS)
    }


def build_qwen_tokenizer(files: QwenTextFiles | None = None) -> Qwen2Tokenizer:
    """Qwen3-VL's tokenizer from the ranks (eos `<|im_end|>`, pad `<|endoftext|>`, no bos)."""
    files = files or qwen_text_files()
    vocab, merges = vocab_and_merges(files.ranks())
    special = [t for t, s in ADDED_TOKENS[1:] if s]
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        added_tokens_decoder=_added_tokens(),  # added in id order from len(vocab) = 151643 on
        extra_special_tokens=special,
        errors="replace",
        split_special_tokens=False,
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_MAX_LENGTH,
    )
    # Qwen's tokenizer.json: a byte-level post-processor that keeps offsets untrimmed
    tok.backend_tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    got = tok.convert_tokens_to_ids([t for t, _ in ADDED_TOKENS])
    if got != list(range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(ADDED_TOKENS))):
        raise RuntimeError(f"Qwen's added tokens landed at {got[:3]}..., not {FIRST_ADDED_ID}...")
    return tok


def tokenizer_config() -> dict:
    """tokenizer_config.json in the form Qwen publishes it (no chat template: Qwen's VL repos
    keep that in chat_template.json, beside the processor)."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": t.content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": t.special,
            }
            for i, t in _added_tokens().items()
        },
        "additional_special_tokens": [t for t, s in ADDED_TOKENS[1:] if s],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer_files(out_dir: Path, files: QwenTextFiles | None = None) -> None:
    """The four tokenizer files Qwen ships, into `out_dir`."""
    files = files or qwen_text_files()
    tok = build_qwen_tokenizer(files)
    vocab, merges = vocab_and_merges(files.ranks())
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    (out_dir / "vocab.json").write_text(json.dumps(ordered, ensure_ascii=False))
    lines = ["#version: 0.2", *(f"{a} {b}" for a, b in merges)]
    (out_dir / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2))
    tok.backend_tokenizer.save(str(out_dir / MARKER))  # last: its presence marks the dir done


def qwen_tokenizer_dir(*, download: bool = True) -> Path:
    """The cached dir with Qwen3-VL's four tokenizer files (built on first use, ~3 s)."""
    files = qwen_text_files(download=download)
    key = f"{TOKENIZER_VERSION}-tf{transformers.__version__}"  # its writer's file format
    return build_once(text_dir() / key, lambda d: write_tokenizer_files(d, files), marker=MARKER)
