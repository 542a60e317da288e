"""benchmarks/bench_gpu_step.py, the GPU machine's script, runs its whole path here on a tiny
config of the same architecture (no GPU in this suite: the 8B figures come from a GPU machine),
and its 8B config is Qwen3-VL-8B's size (8.77 B parameters, counted on the meta device)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks/bench_gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # builds and steps a model (~10 s on 2 cores)
def test_one_tiny_step_on_cpu_prints_time_and_memory(capsys):
    result = bench().main(
        ["--tiny", "--micro-batch", "2", "--images", "2", "--image-px", "64", "--steps", "1"]
    )
    out = capsys.readouterr().out
    assert "skipped: no GPU" in out  # the GPU checks ran first, and said why they skipped
    assert len(result["times"]) == 1 and all(t > 0 and math.isfinite(t) for t in result["times"])
    # 2 episodes x 2 turns x (64 px / 16 = 4x4 patches, merged 2x2: 4 image tokens
    # + vision start/end + 40 text tokens)
    assert result["tokens"] == 2 * 2 * (4 + 2 + 40)
    assert "CPU (not a GPU figure)" in out and "peak:    n/a on CPU" in out


@pytest.mark.slow  # imports transformers' Qwen3-VL
def test_the_8b_config_has_the_8b_size():
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    b = bench()
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(b.config(b.QWEN3_VL_8B))
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(8.767, abs=0.01)
