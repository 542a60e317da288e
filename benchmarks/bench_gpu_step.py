"""On a GPU machine: the GPU checks of `rlkit preflight --gpu`, then one forward/backward of the
Qwen3-VL-8B architecture built from its config with random weights, so a first cluster run can
be budgeted in GPU-hours before any weights are downloaded.

    python benchmarks/bench_gpu_step.py                      # 8B, one micro batch of episodes
    python benchmarks/bench_gpu_step.py --micro-batch 2 --images 25 --no-checks
    python benchmarks/bench_gpu_step.py --tiny --no-checks   # the same code on a CPU, in seconds

A micro batch is what SkyRL's FSDP worker runs at once (`micro_train_batch_size_per_gpu`): whole
multi-turn episodes, each one image per turn (eval set test-large: 384 px, 144 merged image
tokens) plus the turn's text. The model is one unsharded bf16 copy with gradient checkpointing,
no optimizer: the step time is the compute of one micro batch on one GPU, and the peak memory is
that copy's (FSDP over N GPUs divides the weights and gradients, not the activations). Prints
the step times, their median and the peak memory; with no GPU the checks report skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

ROOT = Path(__file__).resolve().parent.parent
IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
QWEN3_VL_8B = {
    # Qwen/Qwen3-VL-8B-Instruct's config.json (text 36 layers x 4096, GQA 32/8 heads of 128;
    # vision 27 x 1152, patch 16, merge 2, deepstack 8/16/24); 8.77 B parameters
    "text_config": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 4096,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
    },
    "tie_word_embeddings": False,
}
TINY = {
    "text_config": {
        **QWEN3_VL_8B["text_config"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rope_parameters": {
            **QWEN3_VL_8B["text_config"]["rope_parameters"],
            "mrope_section": [4, 2, 2],
        },
    },
    "vision_config": {
        **QWEN3_VL_8B["vision_config"],
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "deepstack_visual_indexes": [1],
    },
    "tie_word_embeddings": False,
}


def config(spec: dict) -> Qwen3VLConfig:
    return Qwen3VLConfig(
        **spec,
        image_token_id=IMAGE_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )


def episodes(cfg: Qwen3VLConfig, batch: int, images: int, image_px: int, text: int, gen):
    """`batch` episodes of `images` turns: per turn an image and `text` random text tokens."""
    v = cfg.vision_config
    side = image_px // v.patch_size  # patches per side
    per_image = side * side // v.spatial_merge_size**2
    turn = [VISION_START, *[IMAGE_PAD] * per_image, VISION_END]
    rows = []
    for _ in range(batch):
        ids = []
        for _ in range(images):
            ids += turn + torch.randint(0, 151000, (text,), generator=gen).tolist()
        rows.append(ids)
    input_ids = torch.tensor(rows)
    patch_dim = v.in_channels * v.temporal_patch_size * v.patch_size**2
    pixels = torch.randn(batch * images * side * side, patch_dim, generator=gen)
    grid = torch.tensor([[1, side, side]] * (batch * images))
    mm_token_type_ids = (input_ids == IMAGE_PAD).long()  # 1 marks an image token (M-RoPE)
    return input_ids, mm_token_type_ids, pixels, grid


def step_times(model, inputs, steps: int, device: str) -> list[float]:
    input_ids, mm_types, pixels, grid = (t.to(device) for t in inputs)
    pixels = pixels.to(model.dtype)
    times = []
    for _ in range(steps + 1):  # the first is warm-up (kernels, allocator)
        start = time.perf_counter()
        out = model(
            input_ids=input_ids,
            mm_token_type_ids=mm_types,
            pixel_values=pixels,
            image_grid_thw=grid,
            labels=input_ids,
        )
        out.loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return times[1:]


def run_gpu_checks(model_path: str) -> None:
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "scripts" / "gpu_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    probe.main(["--model", model_path])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a tiny config of the same architecture")
    p.add_argument("--micro-batch", type=int, default=4, help="episodes per forward/backward")
    p.add_argument("--images", type=int, default=12, help="turns (images) per episode")
    p.add_argument("--image-px", type=int, default=384, help="image side (test-large: 384)")
    p.add_argument("--text", type=int, default=40, help="text tokens per turn")
    p.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    p.add_argument("--no-checks", action="store_true", help="skip the GPU checks")
    p.add_argument("--model", default="Qwen/Qwen3-VL-8B-Instruct", help="for the vLLM check")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result JSON (default on a GPU: benchmarks/results/gpu_step.json, which the dry "
        "run's cost lines read)",
    )
    a = p.parse_args(argv)
    if not a.no_checks:
        run_gpu_checks(a.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = config(TINY if a.tiny else QWEN3_VL_8B)
    cfg.text_config.use_cache = False  # training: no KV cache (checkpointing refuses one)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(cfg).to(dtype)
    model.gradient_checkpointing_enable()
    params_b = sum(t.numel() for t in model.parameters()) / 1e9
    gen = torch.Generator().manual_seed(0)
    inputs = episodes(cfg, a.micro_batch, a.images, a.image_px, a.text, gen)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = step_times(model, inputs, a.steps, device)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    tokens = inputs[0].numel()
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU (not a GPU figure)"
    print(f"model:   {'tiny' if a.tiny else 'Qwen3-VL-8B'} architecture, {params_b:.3f} B params")
    print(f"device:  {where}, {dtype}")
    print(f"batch:   {a.micro_batch} episodes x {a.images} turns = {tokens} tokens")
    print("fwd+bwd: " + ", ".join(f"{t:.3f}" for t in times) + " s")
    print(
        f"median:  {statistics.median(times):.3f} s, {tokens / statistics.median(times):.0f} tok/s"
    )
    print(f"peak:    {f'{peak:.1f} GiB' if peak is not None else 'n/a on CPU'}")
    result = {"params_b": params_b, "times": times, "peak_gib": peak, "tokens": tokens}
    result |= {"device": where, "device_type": device, "tiny": a.tiny}
    result |= {"micro_batch": a.micro_batch, "images": a.images, "image_px": a.image_px}
    out = a.out or (ROOT / "benchmarks" / "results" / "gpu_step.json" if device == "cuda" else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"result:  {out} (rlkit submit --dry-run reads it for its cost lines)")
    return result


if __name__ == "__main__":
    main()
