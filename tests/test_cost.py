"""The dry run's cost lines: GPUs paid and used, time to the first step, /fsx bytes and a
GPU-hours range with its basis, from the benchmark's result file when a GPU wrote one."""

from __future__ import annotations

import json

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.preset_checks import estimate_cost, preset_budget
from rlkit.cluster.skyrl.presets import get_preset


def cost(name: str, bench=None, **changes):
    preset = get_preset(name, **changes)
    return estimate_cost(
        preset, preset_budget(preset).budget, **({"bench": bench} if bench else {})
    )


def test_a_six_gpu_layout_pays_for_eight_and_runs_longer(tmp_path):
    eight, six = (
        cost("qwen3vl-8b", tmp_path / "none.json"),
        cost("qwen3vl-8b-6gpu", tmp_path / "none.json"),
    )
    assert (eight.gpus_used, eight.gpus_paid, six.gpus_used, six.gpus_paid) == (8, 8, 6, 8)
    assert six.run_hours[0] > eight.run_hours[0] and six.run_hours[1] > eight.run_hours[1]
    assert "2 idle, still billed" in six.lines()[0] and "idle" not in eight.lines()[0]
    lo, hi = eight.run_hours
    assert lo < hi and f"~{lo * 8:.0f}-{hi * 8:.0f} billed" in "\n".join(eight.lines())
    assert "assumed 100-300 TFLOP/s" in eight.basis[0]  # no measurement: a stated estimate
    staged = cost(
        "qwen3vl-8b", tmp_path / "none.json", model_path="/fsx/models/Qwen3-VL-8B-Instruct"
    )
    assert staged.first_step_min[1] < eight.first_step_min[1]  # no hub download at start
    assert eight.fsx_gb == pytest.approx(581, abs=1)  # kept checkpoints + exports + the model


def test_a_gpu_benchmark_result_is_the_basis_when_there(tmp_path):
    result = {"params_b": 8.77, "tokens": 8000, "times": [2.0, 2.1, 1.9], "device_type": "cuda"}
    bench = tmp_path / "gpu_step.json"
    bench.write_text(json.dumps({**result, "device": "NVIDIA RTX PRO 6000"}))
    measured = cost("qwen3vl-8b", bench)
    assert "4000 tok/s fwd+bwd on NVIDIA RTX PRO 6000 (measured" in measured.basis[0]
    bench.write_text(json.dumps({**result, "device_type": "cpu"}))  # a CPU run is no GPU figure
    assert "assumed" in cost("qwen3vl-8b", bench).basis[0]


def test_the_dry_run_prints_the_cost(capsys):
    assert rlkit_main(["submit", "--preset", "qwen3vl-8b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for words in ("GPUs 8 used of 8 paid", "first step:", "GPU-hours:", "/fsx:", "basis:"):
        assert words in out
