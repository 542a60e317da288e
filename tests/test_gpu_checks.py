"""`rlkit preflight --gpu`'s verdicts, from measurements written by hand: the thresholds, the
fixes, and the report `scripts/gpu_probe.py` gives where there is no GPU (every part skipped,
saying why). The measuring itself needs GPUs (benchmarks/bench_gpu_step.py runs it there)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from rlkit.cluster.gpu_checks import (
    GPU_CHECKS,
    NCCL_FIX,
    Check,
    bus_gbps,
    flash_verdict,
    nccl_verdict,
    skipped,
    verdicts,
    vllm_verdict,
)
from rlkit.cluster.preflight import format_checks, gpu_count

ROOT_DIR = Path(__file__).resolve().parent.parent


def test_bus_bandwidth_is_nccl_tests_definition():
    # 256 MiB in 10 ms on 8 ranks: algbw 26.84 GB/s, x 2*7/8 = 46.97 GB/s
    assert bus_gbps(256 * 2**20, 0.010, 8) == pytest.approx(268435456 / 0.010 * 1.75 / 1e9)
    assert bus_gbps(1e9, 1.0, 2) == pytest.approx(1.0)  # 2 ranks: 2*(1)/2 = 1


def test_nccl_verdicts():
    fast = nccl_verdict({"ranks": 8, "bytes": 256 * 2**20, "seconds": 0.010})
    assert fast.status == "ok" and "bus 47.0 GB/s (floor 10)" in fast.detail
    slow = nccl_verdict({"ranks": 8, "bytes": 256 * 2**20, "seconds": 0.100})  # 4.7 GB/s
    assert slow.status == "fail" and slow.fix == NCCL_FIX and "NCCL_P2P_DISABLE=1" in slow.fix
    hung = nccl_verdict({"hung_after_s": 120})
    assert hung.status == "fail" and hung.detail == "hung: no result after 120 s"
    assert nccl_verdict({"ranks": 1, "bytes": 1, "seconds": 1}).status == "skip"
    assert nccl_verdict({"ranks": 2, "bytes": 2e9, "seconds": 1}, floor_gbps=0.5).status == "ok"


def test_flash_verdicts():
    m = {"out_diff": 0.0078, "grad_diff": 0.0156, "flash_ms": 1.2, "sdpa_ms": 2.5}
    assert flash_verdict(m).status == "ok"
    assert flash_verdict({**m, "grad_diff": 0.5}).status == "fail"
    nan = flash_verdict({**m, "out_diff": math.nan})  # a kernel writing NaN fails, not passes
    assert nan.status == "fail" and "trainer.flash_attn=false" in nan.fix
    assert flash_verdict({"error": "no kernel image"}).detail == "failed: no kernel image"


def test_vllm_sleep_wake_verdicts():
    good = {"answers": ["Blue"] * 4, "awake_gib": [60.0, 60.2, 60.1], "asleep_gib": [3.0] * 3}
    v = vllm_verdict(good)
    assert v.status == "ok" and "3 cycles" in v.detail and ">= 95%" in v.detail
    drift = {**good, "answers": ["Blue", "Blue", "blue blue", "Blue"]}
    assert "changed after cycle 2 of 3" in vllm_verdict(drift).detail
    leak = {**good, "awake_gib": [60.0, 62.0, 64.0]}  # +4 GiB over the cycles
    assert vllm_verdict(leak).status == "fail"
    kept = {**good, "asleep_gib": [30.0, 3.0, 3.0]}  # one sleep freed only half
    assert vllm_verdict(kept).status == "fail"


def test_every_check_skips_without_a_gpu_and_the_table_says_so():
    checks = [Check(v.name, v.status, v.detail, v.fix) for v in skipped("no GPU here")]
    assert [c.name for c in checks] == list(GPU_CHECKS)
    table = format_checks(checks)
    assert table.count("skip  ") == 3 and "skipped: no GPU here" in table
    assert table.endswith("ready: every check passed")  # a skip is not a failure


def test_a_partial_report_skips_what_was_not_run():
    report = {"nccl": {"ranks": 2, "bytes": 2**30, "seconds": 0.05}, "skipped": {"vllm": "off"}}
    by_name = {v.name: v for v in verdicts(report)}
    assert by_name["nccl all-reduce"].status == "ok"
    assert by_name["flash-attn vs sdpa"].detail == "skipped: not run"
    assert by_name["vllm sleep/wake"].detail == "skipped: off"


@pytest.mark.slow  # imports torch in this process
def test_the_probe_reports_every_part_skipped_on_this_cpu():
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT_DIR / "scripts/gpu_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    report = probe.probe(["nccl", "flash", "vllm"], "unused", 1, 1, 1.0)
    assert set(report["skipped"]) == {"nccl", "flash", "vllm"}
    found = verdicts(report)
    assert {v.status for v in found} == {"skip"}
    assert all("no GPU" in v.detail and "cuda.is_available() is False" in v.detail for v in found)


def test_the_gpu_count_wants_whole_pods_of_the_layout():
    # two 8-GPU nodes hold 2 x 6 (the seed's layout); 4 + 4 + 4 GPUs do not, though 12 in all
    assert gpu_count([8, 8], 12, 6, "RTX PRO 6000").status == "ok"
    split = gpu_count([4, 4, 4], 12, 6, "RTX PRO 6000")
    assert split.status == "fail" and "only 0 on nodes with 6 or more" in split.detail
    assert "gpus_per_node" in split.fix
    few = gpu_count([8], 12, 6, "x")
    assert few.status == "fail" and few.fix == "the run needs 12: add GPU nodes"
    assert gpu_count([0, 8], 8, 8, "x").detail == "8 GPUs on 1 node(s) (x)"
