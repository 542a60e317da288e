"""A fixture checkpoint with Qwen3-VL-8B-Instruct's real text side on small random weights, built
offline: docs/models-and-engines.md#the-qwen-fixture-checkpoint-modelqwen_fixturepy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from rlkit.model.load import no_progress_bars
from rlkit.model.qwen_files import QWEN_AGENT, XINFERENCE, build_once, cache_root, qwen_text_files
from rlkit.model.qwen_vocab import qwen_tokenizer_dir

FIXTURE_VERSION = "qwen-fixture-v1"
"""Cache key of the builder: bump it when what build_qwen_fixture writes changes."""
MARKER = "rlkit_fixture.json"
IMAGE_TOKEN_ID = 151655
VIDEO_TOKEN_ID = 151656
VISION_START_ID = 151652
VISION_END_ID = 151653
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
"""Sampling defaults in the checkpoint, each off neutral on purpose (repetition_penalty too), so a
test catches any of them leaking into rlkit's sampling."""
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
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


def fixture_config() -> Qwen3VLConfig:
    """Qwen3-VL-8B-Instruct's config, shrunk: same ids, rope scheme and vocabulary rows."""
    return Qwen3VLConfig(
        text_config={
            "vocab_size": EMBEDDING_ROWS,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": [8, 4, 4],  # Qwen's [24, 20, 20] at a quarter of head_dim
                "mrope_interleaved": True,
            },
            "bos_token_id": GENERATION["bos_token_id"],
            "eos_token_id": 151645,
            "pad_token_id": GENERATION["pad_token_id"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "num_position_embeddings": 2304,  # Qwen's 48 x 48 learned grid, interpolated
            "deepstack_visual_indexes": [1],
        },
        image_token_id=IMAGE_TOKEN_ID,
        video_token_id=VIDEO_TOKEN_ID,
        vision_start_token_id=VISION_START_ID,
        vision_end_token_id=VISION_END_ID,
        tie_word_embeddings=True,  # halves the 151,936-row matrix on disk
    )


def build_qwen_fixture(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the fixture checkpoint into `out_dir` (weights seeded by `seed`, the caller's torch
    RNG untouched); ~10 s cold."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = qwen_text_files()
    tok_dir = qwen_tokenizer_dir()
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(fixture_config())
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
    """The fixture dir (seed 0), built once per machine, per builder version and per
    transformers version (config files follow its format), then reused."""
    key = f"{FIXTURE_VERSION}-tf{transformers.__version__}-seed0"
    return build_once(cache_root() / "qwen-fixture" / key, build_qwen_fixture, marker=MARKER)


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
