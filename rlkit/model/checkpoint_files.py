"""What a checkpoint dir's own files say about generation (stop ids, sampling defaults, template
source), torch-free: docs/models-and-engines.md#a-checkpoints-own-files-modelcheckpoint_filespy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NEUTRAL_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""Sampling knobs at values that leave the model's distribution as it is (top_k 0: no limit)."""

GENERATION_CONFIG = "generation_config.json"
"""Where a checkpoint keeps its generation defaults (eos ids, sampling)."""
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
"""Where transformers looks for a chat template, the processor's files first."""


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def token_id(path: str | Path, token: str) -> int | None:
    """The id of `token` from the checkpoint's tokenizer files (added tokens, then the vocab)."""
    p = Path(path)
    tok = _json(p / "tokenizer.json")
    for added in tok.get("added_tokens", []):
        if added.get("content") == token:
            return int(added["id"])
    for entry in _json(p / "tokenizer_config.json").get("added_tokens_decoder", {}).items():
        if entry[1].get("content") == token:
            return int(entry[0])
    vocab = tok.get("model", {}).get("vocab") or _json(p / "vocab.json")
    return int(vocab[token]) if isinstance(vocab, dict) and token in vocab else None


def stop_ids(path: str | Path, eos_id: int | None = None) -> tuple[int, ...]:
    """Ids that end an answer, end of turn first (`eos_id`, else `<|im_end|>` in the tokenizer
    files), then the generation config's `eos_token_id`s; () when the checkpoint names none."""
    if eos_id is None:
        eos_id = token_id(path, "<|im_end|>")
    found = [*_ids(eos_id), *_ids(_json(Path(path) / GENERATION_CONFIG).get("eos_token_id"))]
    return tuple(dict.fromkeys(found))


def sampling_defaults(path: str | Path) -> dict[str, Any]:
    """The checkpoint's sampling defaults that differ from `NEUTRAL_SAMPLING` (what rlkit
    overrides), e.g. {"top_k": 20, "repetition_penalty": 1.05}."""
    cfg = _json(Path(path) / GENERATION_CONFIG)
    return {
        key: cfg[key]
        for key, neutral in NEUTRAL_SAMPLING.items()
        if cfg.get(key) not in (None, neutral) and not (key == "top_k" and cfg[key] == -1)
    }


def template_source(path: str | Path) -> str | None:
    """The file the processor's chat template comes from (the first of `TEMPLATE_FILES` that
    holds one), None when the checkpoint has no template."""
    p = Path(path)
    if (p / "chat_template.jinja").is_file():
        return "chat_template.jinja"
    for name in TEMPLATE_FILES[1:]:
        if _json(p / name).get("chat_template"):
            return name
    return None
