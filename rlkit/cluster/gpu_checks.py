"""`rlkit preflight --gpu`: the checks that exercise the GPUs (NCCL, flash-attn, vLLM sleep/wake),
judged in plain Python; `scripts/gpu_probe.py` measures. What each catches:
docs/decisions.md#preflight-and-the-gpu-checks."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from rlkit.run.remote import log_tail


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """ok, warn (the run starts but wastes time or money), fail, or skip (the detail says why)."""
    detail: str
    fix: str = ""


NCCL_FLOOR_GBPS = 10.0
"""All-reduce bus bandwidth in GB/s (nccl-tests' busbw) below which the nccl check fails."""
FLASH_TOLERANCE = 2e-2
"""Largest |flash-attn - SDPA| allowed on outputs and gradients (bf16, unit-scale inputs)."""
SLEEP_FREES_SHARE = 0.8
"""Of the memory a vLLM engine holds awake, what one sleep must give back."""
LEAK_GIB = 1.0
"""Growth of the awake engine's memory over the cycles that counts as a leak."""
GPU_CHECKS = ("nccl all-reduce", "flash-attn vs sdpa", "vllm sleep/wake")
NCCL_FIX = (
    "NCCL over PCIe P2P hangs or crawls with IOMMU/ACS on: set NCCL_P2P_DISABLE=1 in the worker "
    "env (deploy/raycluster.yaml) or disable ACS on the nodes"
)
FLASH_FIX = "set trainer.flash_attn=false (SDPA) until a flash-attn build for sm_120 agrees"
VLLM_FIX = (
    "keep colocation but try another vLLM (nightly/cu13 build) or attention_backend=TRITON_ATTN; "
    "else split policy and engines (colocate_all=false) so sleep mode stays off"
)


def skipped(reason: str) -> list[Check]:
    """Every GPU check, skipped for `reason` (e.g. "no GPU in this cluster")."""
    return [Check(name, "skip", f"skipped: {reason}") for name in GPU_CHECKS]


def bus_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce in GB/s: bytes / time x 2(n-1)/n."""
    return nbytes / seconds * 2 * (ranks - 1) / ranks / 1e9


def nccl_verdict(m: dict[str, Any], floor_gbps: float = NCCL_FLOOR_GBPS) -> Check:
    """From the probe's {"ranks", "bytes", "seconds"} or {"error"} / {"hung_after_s"}."""
    name = GPU_CHECKS[0]
    if "hung_after_s" in m:
        return Check(name, "fail", f"hung: no result after {m['hung_after_s']:.0f} s", NCCL_FIX)
    if "error" in m:
        return Check(name, "fail", f"failed: {m['error']}", NCCL_FIX)
    if m["ranks"] < 2:
        return Check(name, "skip", "skipped: one GPU, nothing to all-reduce")
    gbps = bus_gbps(m["bytes"], m["seconds"], m["ranks"])
    detail = (
        f"{m['ranks']} GPUs, {m['bytes'] / 2**20:.0f} MiB in {m['seconds'] * 1e3:.1f} ms: "
        f"bus {gbps:.1f} GB/s (floor {floor_gbps:g})"
    )
    if gbps < floor_gbps:
        return Check(name, "fail", detail, NCCL_FIX)
    return Check(name, "ok", detail)


def flash_verdict(m: dict[str, Any], tolerance: float = FLASH_TOLERANCE) -> Check:
    """From the probe's {"out_diff", "grad_diff", "flash_ms", "sdpa_ms"} or {"error"}."""
    name = GPU_CHECKS[1]
    if "error" in m:
        return Check(name, "fail", f"failed: {m['error']}", FLASH_FIX)
    worst = max(m["out_diff"], m["grad_diff"])
    detail = (
        f"max |diff| out {m['out_diff']:.2g}, grad {m['grad_diff']:.2g} (tolerance "
        f"{tolerance:g}); fwd+bwd flash {m['flash_ms']:.2f} ms, sdpa {m['sdpa_ms']:.2f} ms"
    )
    if not worst <= tolerance:  # NaN fails too
        return Check(name, "fail", detail, FLASH_FIX)
    return Check(name, "ok", detail)


def vllm_verdict(m: dict[str, Any]) -> Check:
    """From the probe's {"answers", "awake_gib", "asleep_gib"} (one per cycle) or {"error"}."""
    name = GPU_CHECKS[2]
    if "error" in m:
        return Check(name, "fail", f"failed: {m['error']}", VLLM_FIX)
    answers, awake, asleep = m["answers"], m["awake_gib"], m["asleep_gib"]
    cycles = len(answers) - 1
    changed = [i for i, a in enumerate(answers[1:], 1) if a != answers[0]]
    if changed:
        first, then = answers[0], answers[changed[0]]
        detail = f"the greedy answer changed after cycle {changed[0]} of {cycles}: "
        return Check(name, "fail", f"{detail}{first!r} -> {then!r}", VLLM_FIX)
    freed = min(1 - s / a for a, s in zip(awake, asleep, strict=True)) if awake else 0.0
    growth = awake[-1] - awake[0] if awake else 0.0
    detail = (
        f"{cycles} cycles, same greedy answer; a sleep frees >= {freed:.0%} of "
        f"{awake[0]:.1f} GiB; awake memory grew {growth:+.1f} GiB"
    )
    if freed < SLEEP_FREES_SHARE or growth > LEAK_GIB:
        return Check(name, "fail", detail, VLLM_FIX)
    return Check(name, "ok", detail)


def verdicts(probe: dict[str, Any]) -> list[Check]:
    """Every GPU check from one `scripts/gpu_probe.py --json` report; a part not run is skipped."""
    judges = {"nccl": nccl_verdict, "flash": flash_verdict, "vllm": vllm_verdict}
    out = []
    for (key, judge), name in zip(judges.items(), GPU_CHECKS, strict=True):
        part = probe.get(key)
        if part is None:
            reason = probe.get("skipped", {}).get(key, "not run")
            out.append(Check(name, "skip", f"skipped: {reason}"))
        else:
            out.append(judge(part))
    return out


def alive_resources() -> list[dict]:
    """Ray's resources of every alive node of the cluster this job runs on."""
    import ray

    ray.init(ignore_reinit_error=True, log_to_driver=False)
    return [n["Resources"] for n in ray.nodes() if n["Alive"] and n["Resources"]]


def gpus_by_node(alive: list[dict]) -> list[float]:
    """Real GPUs of each node (a local head's logical GPUs count none)."""
    return [0 if r.get("accelerator_type:logical") else r.get("GPU", 0) for r in alive]


def _run_probe(model: str, timeout_s: float) -> dict:
    """On a GPU worker: `scripts/gpu_probe.py --json`'s report."""
    from rlkit.cluster.workdir import project_root

    script = project_root() / "scripts" / "gpu_probe.py"
    argv = [sys.executable, str(script), "--json", "--model", model]
    argv += ["--timeout", str(int(timeout_s))]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s * 4)
    except subprocess.TimeoutExpired:
        return {"error": f"the GPU probe ran past {timeout_s * 4:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return {"error": f"the GPU probe exited {out.returncode}: {log_tail(out.stderr, 1)}"}
    return json.loads(lines[-1])


def gpu_exercise(model: str, timeout_s: float = 120.0) -> list[Check]:
    """The GPU checks, or each skipped where there is no GPU (the preflight job's `--gpu`)."""
    import ray

    per_node = gpus_by_node(alive_resources())
    if not sum(per_node):
        return skipped("no GPU in this cluster, nothing to exercise")
    gpus = int(max(per_node))
    probe = ray.get(ray.remote(num_gpus=gpus)(_run_probe).remote(model, timeout_s))
    if "error" in probe:
        why = f"skipped: the probe did not report ({probe['error']})"
        return [Check(name, "fail", why) for name in GPU_CHECKS]
    return verdicts(probe)
