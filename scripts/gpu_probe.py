"""Exercise a node's GPUs the way a SkyRL run will, and report the measurements as one JSON line.

    python scripts/gpu_probe.py --json [--model Qwen/Qwen3-VL-8B-Instruct] [--only nccl,flash]

`rlkit preflight --gpu` runs this on a GPU worker with all of a node's GPUs and turns the
report into checks with fixes (`rlkit.cluster.gpu_checks`, which says what each measurement is
for and its thresholds); `benchmarks/bench_gpu_step.py` runs it on a GPU machine directly.
Parts:
- nccl:  an all-reduce of --nccl-mib MiB of bf16 over every visible GPU (one process each),
         timed after a warm-up; a run past --timeout seconds is reported as hung;
- flash: flash-attn's forward and backward against torch's SDPA on the same bf16 inputs;
- vllm:  --cycles sleep/wake cycles of a vLLM engine on --model with sleep mode on (as SkyRL
         colocates it), a fixed greedy answer and the GPU memory in use at each step.
Where there is no GPU every part is skipped, and the report says why.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

PROMPT = "Answer in one word. On a clear day, the colour of the sky is"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _allreduce_rank(rank: int, world: int, port: int, nbytes: int, iters: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(2):  # warm-up: communicators and buffers
        dist.all_reduce(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    if rank == 0:
        queue.put({"ranks": world, "bytes": nbytes, "seconds": seconds})
    dist.destroy_process_group()


def probe_nccl(gpus: int, mib: int, iters: int, timeout_s: float) -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port, nbytes = _free_port(), mib * 2**20
    procs = [
        ctx.Process(target=_allreduce_rank, args=(r, gpus, port, nbytes, iters, queue))
        for r in range(gpus)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    if any(p.is_alive() for p in procs):
        for p in procs:
            p.kill()
        return {"hung_after_s": timeout_s}
    if any(p.exitcode for p in procs) or queue.empty():
        codes = [p.exitcode for p in procs]
        return {"error": f"a rank exited with {codes} (NCCL_DEBUG=INFO says why)"}
    return queue.get()


def probe_flash(batch: int = 2, seq: int = 2048, heads: int = 32, dim: int = 128) -> dict:
    import torch
    import torch.nn.functional as F

    try:
        from flash_attn import flash_attn_func
    except Exception as e:  # noqa: BLE001 - any import failure is the finding
        return {"error": f"flash_attn does not import: {e}"}
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch, seq, heads, dim)  # flash-attn's layout; SDPA's is (batch, heads, seq, dim)
    q, k, v = (
        torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3)
    )
    grad = torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

    def flash(q, k, v):
        return flash_attn_func(q, k, v, causal=True)

    def sdpa(q, k, v):
        t = [x.transpose(1, 2) for x in (q, k, v)]
        return F.scaled_dot_product_attention(*t, is_causal=True).transpose(1, 2)

    def run(fn) -> tuple[Any, Any, float]:
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves)
        out.backward(grad)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            again = [x.detach().clone().requires_grad_() for x in (q, k, v)]
            fn(*again).backward(grad)
        torch.cuda.synchronize()
        grads = torch.cat([x.grad.flatten() for x in leaves])
        return out.detach(), grads, (time.perf_counter() - start) / 5 * 1e3

    try:
        f_out, f_grad, f_ms = run(flash)
    except Exception as e:  # noqa: BLE001 - a kernel that fails to launch is the finding
        return {"error": f"flash-attn forward/backward failed: {e}"}
    s_out, s_grad, s_ms = run(sdpa)
    return {
        "out_diff": (f_out.float() - s_out.float()).abs().max().item(),
        "grad_diff": (f_grad.float() - s_grad.float()).abs().max().item(),
        "flash_ms": f_ms,
        "sdpa_ms": s_ms,
    }


def _used_gib() -> float:
    import torch

    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def probe_vllm(model: str, cycles: int) -> dict[str, Any]:
    try:
        from vllm import LLM, SamplingParams
    except Exception as e:  # noqa: BLE001
        return {"error": f"vllm does not import: {e}"}
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    try:
        llm = LLM(
            model=model, enable_sleep_mode=True, gpu_memory_utilization=0.5, max_model_len=4096
        )
        answers = [llm.generate([PROMPT], greedy)[0].outputs[0].text]
        awake, asleep = [], []
        for _ in range(cycles):
            awake.append(_used_gib())
            llm.sleep(level=1)
            asleep.append(_used_gib())
            llm.wake_up()
            answers.append(llm.generate([PROMPT], greedy)[0].outputs[0].text)
    except Exception as e:  # noqa: BLE001 - a crash in a cycle is the finding
        return {"error": f"{type(e).__name__}: {e}"}
    return {"answers": answers, "awake_gib": awake, "asleep_gib": asleep}


def probe(parts: list[str], model: str, cycles: int, nccl_mib: int, timeout_s: float) -> dict:
    """The measurements of `parts` (nccl, flash, vllm); {"skipped": {part: why}} for the rest."""
    try:
        import torch
    except ImportError:
        return {"skipped": {p: "torch is not installed" for p in parts}}
    if not torch.cuda.is_available():
        why = f"no GPU (torch {torch.__version__}: cuda.is_available() is False)"
        return {"skipped": {p: why for p in parts}}
    out: dict[str, Any] = {"gpus": torch.cuda.device_count(), "name": torch.cuda.get_device_name()}
    if "nccl" in parts:
        out["nccl"] = probe_nccl(torch.cuda.device_count(), nccl_mib, 10, timeout_s)
    if "flash" in parts:
        out["flash"] = probe_flash()
    if "vllm" in parts:
        out["vllm"] = probe_vllm(model, cycles)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="one JSON line (for rlkit preflight)")
    p.add_argument("--model", default="Qwen/Qwen3-VL-8B-Instruct")
    p.add_argument("--only", default="nccl,flash,vllm", help="comma-separated parts")
    p.add_argument("--cycles", type=int, default=3, help="vLLM sleep/wake cycles")
    p.add_argument("--nccl-mib", type=int, default=256, help="all-reduce size")
    p.add_argument("--timeout", type=float, default=120.0, help="all-reduce hang timeout (s)")
    a = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report = probe(a.only.split(","), a.model, a.cycles, a.nccl_mib, a.timeout)
    if a.json:
        print(json.dumps(report), flush=True)
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from rlkit.cluster.gpu_checks import verdicts

    for v in verdicts(report):
        print(
            f"{v.status:<4}  {v.name:<18}  {v.detail}" + (f"\n      fix: {v.fix}" if v.fix else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
