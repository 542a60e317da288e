"""SkyRL overrides that set the engines and devices of a run: vLLM's own engine arguments
(through SkyRL's `engine_init_kwargs`) and what a CPU host changes. `build_overrides` in
`rlkit.cluster.skyrl.presets` adds them to every run's command; the algorithm's switches
(truncated importance sampling included) are the recipe's (`rlkit.recipe`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlkit.cluster.skyrl.presets import SkyRLPreset


def device_overrides(p: SkyRLPreset) -> list[str]:
    """What a CPU host changes in SkyRL's config: no flash attention, fp32 end to end (so the
    rollout and trainer logprobs can be compared tightly), eager vLLM, a KV cache in GiB,
    fewer dataloader workers. The seam itself (`cpu_seam.overrides`) is added by the entry
    at every start, with this attempt's own weight-sync directories."""
    out = []
    if p.layout.dataloader_workers is not None:
        out.append(f"data.dataloader.num_workers={p.layout.dataloader_workers}")
    if p.layout.kv_cache_gb is not None:
        key = "generator.inference_engine.engine_init_kwargs.kv_cache_memory_bytes"
        out.append(f"{key}={int(p.layout.kv_cache_gb * 2**30)}")
    if p.layout.device != "cpu":
        return out
    return [
        *out,
        "trainer.flash_attn=false",
        # SkyRL's GPU monitor scrapes the head's Prometheus page every 5 s in the trainer's
        # process, the one that runs the generator's event loop: no GPUs to report here
        "trainer.enable_ray_gpu_monitor=false",
        "generator.inference_engine.model_dtype=float32",
        "generator.inference_engine.enforce_eager=true",
        *(
            f"trainer.{role}.fsdp_config.mixed_precision.{k}=fp32"
            for role in ("policy", "ref")
            for k in ("param_dtype", "reduce_dtype", "buffer_dtype")
        ),
    ]


MM_CACHE_KWARG = "mm_processor_cache_gb"
"""vLLM's multimodal cache per engine in GiB; SkyRL sets 0, `engine_init_kwargs` overrides it."""


def engine_kwargs(p: SkyRLPreset) -> list[str]:
    """vLLM engine arguments, set through SkyRL's `engine_init_kwargs` (vLLM's own names)."""
    key = "generator.inference_engine.engine_init_kwargs"
    out = [
        f"{key}.max_model_len={p.task.max_model_len}",
        # vLLM refuses a prompt with more images than this (HTTP 400); one image per turn
        f"{key}.limit_mm_per_prompt.image={p.images_per_episode}",
        # vLLM >= 0.32 normalises Qwen3-VL pixels on the GPU by default and then hands SkyRL raw
        # uint8 patches, which the trainer's forward would read unnormalised (0.5 nats off,
        # tests/skyrl/test_vllm_engine.py); normalised on the CPU, both see the same pixels
        f"{key}.mm_device_do_normalize=false",
    ]
    if p.layout.mm_cache_gb > 0:
        # each engine keeps the pictures it has processed; rlkit's generator then sends a
        # picture's tensors once an episode (rlkit.cluster.skyrl.render), not every turn
        out.append(f"{key}.{MM_CACHE_KWARG}={p.layout.mm_cache_gb}")
    if p.layout.attention_backend:
        out.append(f"{key}.attention_backend={p.layout.attention_backend}")
    return out
