"""What a SkyRL run will cost before it starts (the dry run's `cost` lines): GPUs, time to the
first step, /fsx bytes, GPU-hours as a range with its basis: docs/cluster.md#what-a-run-costs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlkit.cluster.skyrl.preset_checks import storage_estimate
from rlkit.cluster.skyrl.presets import SkyRLPreset
from rlkit.cluster.workdir import project_root

BENCH_RESULT = project_root() / "benchmarks" / "results" / "gpu_step.json"
"""Written by `python benchmarks/bench_gpu_step.py` on a GPU (the 8B's fwd+bwd tokens/s)."""
ASSUMED_TFLOPS = (100.0, 300.0)
"""Achieved bf16 TFLOP/s per GPU in FSDP training, assumed: a wide band below the peak."""
FLOPS_PER_PARAM_TOKEN = 12
"""Of a GRPO step: fwd + bwd (6), checkpointing's second fwd (2), old policy's and ref's fwd (4)."""
BENCH_FLOPS_PER_PARAM_TOKEN = 8
"""What bench_gpu_step.py's timed fwd+bwd does per parameter and token (checkpointing on)."""
DECODE_TOKENS_PER_S = (1000.0, 3000.0)
"""vLLM decoding throughput per GPU for an 8B in bf16, many sequences in flight; assumed."""
TURN_LATENCY_S = (0.5, 3.0)
"""One sequential turn (prefill of its image, answer, env step); a rollout's floor; assumed."""
ANSWER_TOKENS = (8, 200)
"""Tokens a turn's answer takes: the bare `<action>` answer up to a short reasoning."""
START_MINUTES = {
    "image pull (first time on a node)": (5.0, 15.0),
    "model load (staged on /fsx)": (1.0, 3.0),
    "vLLM engines (weights, CUDA graphs)": (2.0, 5.0),
}
"""Time before the step-0 eval starts, assumed; a hub model adds `HUB_DOWNLOAD_MB_S`."""
HUB_DOWNLOAD_MB_S = (50.0, 500.0)
"""Hub download rate per pod when the model is not staged, assumed."""


@dataclass(frozen=True)
class Cost:
    gpus_used: int
    gpus_paid: int
    first_step_min: tuple[float, float]
    step_s: tuple[float, float]
    run_hours: tuple[float, float]
    fsx_gb: float
    basis: tuple[str, ...]

    def lines(self) -> list[str]:
        lo, hi = self.run_hours
        idle = self.gpus_paid - self.gpus_used
        note = f" ({idle} idle, still billed: the node is billed whole)" if idle else ""
        return [
            f"cost:          GPUs {self.gpus_used} used of {self.gpus_paid} paid{note}",
            f"  first step:  ~{self.first_step_min[0]:.0f}-{self.first_step_min[1]:.0f} min "
            "after the job starts (pull, load, vLLM, step-0 eval, step 1)",
            f"  per step:    ~{self.step_s[0]:.0f}-{self.step_s[1]:.0f} s; whole run "
            f"~{lo:.1f}-{hi:.1f} h",
            f"  GPU-hours:   ~{lo * self.gpus_paid:.0f}-{hi * self.gpus_paid:.0f} billed "
            f"({self.gpus_paid} GPUs x the run's hours)",
            f"  /fsx:        ~{self.fsx_gb:.0f} GB (run dir + the model once)",
            *(f"  basis:       {b}" for b in self.basis),
        ]


def measured_tokens_per_s(params_b: float, path: Path = BENCH_RESULT) -> tuple[float, str] | None:
    """Training tokens/s per GPU of a `params_b` model (scaled from the benchmark's) and where it
    came from; None without a GPU result."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if result.get("device_type") != "cuda" or result.get("tiny"):
        return None
    times = sorted(result["times"])
    bench = result["tokens"] / times[len(times) // 2]
    where = f"{path.name}: {bench:.0f} tok/s fwd+bwd on {result.get('device', 'a GPU')}"
    return bench * result["params_b"] / params_b, where


def estimate_cost(p: SkyRLPreset, budget, bench: Path = BENCH_RESULT) -> Cost:
    """The run's cost range for preset `p` and its token budget (`TurnBudget`)."""
    gpus = p.num_gpus
    paid = p.layout.nodes * (p.instance.gpus if p.instance else p.node_gpus)
    episodes = p.prompts_per_step * p.batch.group_size
    # trained tokens of one episode: half the turn budget at short answers, up to the cut
    low = budget.history(max(1, p.task.max_turns // 2), budget.canonical)
    high = min(budget.worst_case, p.task.max_input_length + budget.answer)
    tokens = [episodes * low, episodes * max(low, high)]
    params = p.model.model_params_b * 1e9
    measured = measured_tokens_per_s(p.model.model_params_b, bench)
    if measured is not None:
        per_gpu = measured[0] * BENCH_FLOPS_PER_PARAM_TOKEN / FLOPS_PER_PARAM_TOKEN
        train = (tokens[0] / (per_gpu * gpus), tokens[1] / (per_gpu * gpus))
        basis = [f"training from {measured[1]} (measured; FSDP overlap assumed perfect)"]
    else:
        train = tuple(
            t * FLOPS_PER_PARAM_TOKEN * params / (gpus * f * 1e12)
            for t, f in zip(tokens, reversed(ASSUMED_TFLOPS), strict=True)
        )
        basis = [
            f"training at an assumed {ASSUMED_TFLOPS[0]:.0f}-{ASSUMED_TFLOPS[1]:.0f} TFLOP/s per "
            f"GPU (measure it: python {BENCH_RESULT.parent.parent.name}/bench_gpu_step.py on one "
            "GPU writes the result file this reads)"
        ]
    turns = (max(1, p.task.max_turns // 2), p.task.max_turns)

    def rollout(n_episodes: int, i: int) -> float:
        generated = n_episodes * turns[i] * ANSWER_TOKENS[i]
        decode = generated / (gpus * DECODE_TOKENS_PER_S[1 - i])
        return max(turns[i] * TURN_LATENCY_S[i], decode)

    step = tuple(train[i] + rollout(episodes, i) for i in (0, 1))
    evals = p.batch.steps // p.eval.eval_interval + 1  # every interval, and once before training
    eval_s = tuple(rollout(p.eval_episodes, i) for i in (0, 1))
    start = [sum(v[i] for v in START_MINUTES.values()) for i in (0, 1)]
    staged = p.model.model_path.startswith("/")
    if not staged:
        size_mb = p.model.model_params_b * 2e3  # bf16 weights
        start = [start[i] + size_mb / HUB_DOWNLOAD_MB_S[1 - i] / 60 for i in (0, 1)]
    first = tuple(start[i] + (eval_s[i] + step[i]) / 60 for i in (0, 1))
    hours = tuple(
        (start[i] * 60 + p.batch.steps * step[i] + evals * eval_s[i]) / 3600 for i in (0, 1)
    )
    basis += [
        f"rollouts: {episodes} episodes a step of {turns[0]}-{turns[1]} turns, "
        f"{ANSWER_TOKENS[0]}-{ANSWER_TOKENS[1]} answer tokens, vLLM at an assumed "
        f"{DECODE_TOKENS_PER_S[0]:.0f}-{DECODE_TOKENS_PER_S[1]:.0f} tok/s per GPU",
        f"{p.batch.steps} steps, {evals} evals of {p.eval_episodes} episodes "
        f"(eval_protocol={p.eval.eval_protocol}), start-up "
        f"assumed ({'model staged' if staged else 'model from the hub: stage it to save the download'})",
    ]
    model_gb = p.model.model_params_b * 2
    return Cost(
        gpus_used=gpus,
        gpus_paid=paid,
        first_step_min=first,
        step_s=step,
        run_hours=hours,
        fsx_gb=storage_estimate(p).total_gb + model_gb,
        basis=tuple(basis),
    )
