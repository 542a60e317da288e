"""What the dry run, `rlkit submit` and preflight check of a SkyRL preset at plan time: its token
budget (`check_budget`), what it leaves on /fsx (`check_storage`), the dry run's start and eval
lines, and its cost (`estimate_cost`: docs/cluster.md#what-a-run-costs). The checks every preset
passes when built are in `presets`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from rlkit.cluster.skyrl.preset_sections import model_state, task_view
from rlkit.cluster.skyrl.presets import TINY_WARM, SkyRLPreset
from rlkit.cluster.workdir import project_root
from rlkit.env.visgym_text import read_prompt_file
from rlkit.errors import UsageError
from rlkit.model.budget_report import BudgetReport, budget_report
from rlkit.model.budgets import QWEN_ASSUMED, TINY_ASSUMED


def eval_plan(p: SkyRLPreset) -> str:
    """The run's evals in words, each with its protocol, as the dry run prints them."""
    e = p.eval
    sets = ", ".join(f"{s} ({t} turns)" for s, t in p.turn_budgets.items())
    when = f"before training and every {e.eval_interval} steps on {sets}"
    part = "" if e.eval_mazes == 64 else ", not the whole set the seed's 28/64 is over"
    seed = f"the seed's protocol ({e.eval_mazes} mazes{part}, greedy, one sample a maze, exact CI)"
    sampled = (
        f"sampled ({e.eval_mazes} mazes x {e.eval_samples} at temperature "
        f"{e.eval_temperature}, CI clustered by maze)"
    )
    what = {"seed": seed, "sampled": sampled, "both": f"{seed}, then {sampled}"}
    return f"{what[e.eval_protocol]}; {when}"


def start_plan(p: SkyRLPreset) -> str:
    """The dry run's `start` line: the model as policy and reference, answers, reward, rules."""
    t = p.task
    answers = (
        "VisGym's ('move', D) with D 0=right 1=up 2=left 3=down, ('stop', 'stop')"
        if t.answer_format == "visgym-sft"
        else "SkyRL's <action>WORD</action>"
    )
    reward = "the verdict" if not t.format_weight else f"{1 - t.format_weight:g} x verdict"
    reward += f" + {t.format_weight:g} x format" if t.format_weight else ""
    rules = "rlkit's"
    if t.prompt_file:
        rules = f"{t.prompt_file} (sha256 {read_prompt_file(t.prompt_file)[1][:12]})"
    model = p.model.model_path
    return (
        f"{model} as policy and reference ({model_state(model)}); answers {answers}; "
        f"reward {reward}; rules {rules}"
    )


def model_files(model_path: str) -> Path | None:
    """The checkpoint's directory here (a path, or the HF cache's snapshot of a hub id), or None."""
    path = Path(model_path)
    if (path / "config.json").is_file():
        return path
    if model_path.startswith(("/", ".")) or ":" in model_path:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, "config.json")
    except Exception:  # noqa: BLE001 - no hub client or a malformed id: not cached here
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def preset_budget(p: SkyRLPreset, model_dir: str | Path | None | bool = True) -> BudgetReport:
    """The token budget of `p`'s model on its longest eval set, from `model_dir` (True: wherever
    `model_files` finds it), else from the assumed values."""
    turns = p.turn_budgets
    longest = max(turns, key=turns.__getitem__)  # eval_set on a tie
    task = replace(p.task, eval_set=longest, max_turns=turns[longest])
    tiny = p.model.model_path == TINY_WARM
    if model_dir is True:
        model_dir = None if tiny else model_files(p.model.model_path)
    return budget_report(
        p.model.model_path,
        model_dir or None,
        task.eval_set,
        assumed=TINY_ASSUMED if tiny else QWEN_ASSUMED,
        where="rlkit's tiny model, built and warm-started by the job" if tiny else None,
        max_turns=task.max_turns,
        max_input_length=p.task.max_input_length,
        max_model_len=p.task.max_model_len,
        max_generate_length=p.task.max_generate_length,
        cfg=task_view(task),
        history=p.task.history,
    )


def generate_length(p: SkyRLPreset) -> int:
    """Tokens per answer: `max_generate_length`, else the canonical answer's length plus room."""
    if p.task.max_generate_length is not None:
        return p.task.max_generate_length
    return preset_budget(p).budget.answer


def check_budget(p: SkyRLPreset) -> BudgetReport:
    """The preset's budget report, or a one-line UsageError naming the knob when it cannot fit."""
    report = preset_budget(p)
    report.check()
    return report


@dataclass(frozen=True)
class StorageEstimate:
    """What a run leaves on /fsx: the kept checkpoints and every HF export (never pruned)."""

    checkpoint_gb: float
    export_gb: float
    checkpoints_kept: int
    exports: int
    lora: bool = False
    """The exports are LoRA adapters (SkyRL exports a LoRA policy's adapter only)."""

    @property
    def total_gb(self) -> float:
        return self.checkpoint_gb * self.checkpoints_kept + self.export_gb * self.exports

    def summary(self) -> str:
        what = "LoRA adapter exports" if self.lora else "HF exports"
        size = f"{self.export_gb:.2f}" if self.lora else f"{self.export_gb:.0f}"
        return (
            f"~{self.total_gb:.0f} GB on /fsx: {self.checkpoints_kept} checkpoints x "
            f"{self.checkpoint_gb:.0f} GB + {self.exports} {what} x {size} GB"
        )


CHECKPOINT_BYTES_PER_PARAM = 12
"""An FSDP checkpoint holds fp32 weights (4 B) and Adam's two fp32 moments (8 B) per parameter."""
EXPORT_BYTES_PER_PARAM = 2
"""An HF export is the bf16 weights (Qwen3-VL-8B: ~17.5 GB)."""
LORA_PARAMS_PER_RANK_PER_B = 0.374e6
"""`all-linear` adapter parameters per unit of rank and billion model parameters (docs/cluster.md)."""
ADAPTER_BYTES_PER_PARAM = 4
"""An adapter is saved from FSDP's fp32 parameters."""
LORA_CHECKPOINT_BYTES_PER_PARAM = 4
"""A LoRA checkpoint still holds every fp32 base weight; only Adam's moments shrink."""


def storage_estimate(p: SkyRLPreset) -> StorageEstimate:
    """What `p` leaves on /fsx: a checkpoint and export every `ckpt_interval` and at the end."""
    every = p.storage.ckpt_interval
    saves = len({*range(every, p.batch.steps + 1, every), p.batch.steps})
    params = p.model.model_params_b
    adapter = p.model.lora_rank * LORA_PARAMS_PER_RANK_PER_B * params / 1e9  # 0 with LoRA off
    if adapter:  # weights + the adapter with its moments + the adapter again (lora_adapter/)
        checkpoint = params * LORA_CHECKPOINT_BYTES_PER_PARAM + adapter * (
            CHECKPOINT_BYTES_PER_PARAM + ADAPTER_BYTES_PER_PARAM
        )
        export = adapter * ADAPTER_BYTES_PER_PARAM
    else:
        checkpoint = params * CHECKPOINT_BYTES_PER_PARAM
        export = params * EXPORT_BYTES_PER_PARAM
    return StorageEstimate(
        checkpoint_gb=checkpoint,
        export_gb=export,
        checkpoints_kept=min(saves, p.storage.max_ckpts_to_keep),
        exports=saves,
        lora=bool(adapter),
    )


def check_storage(p: SkyRLPreset) -> StorageEstimate:
    """The estimate, or a one-line UsageError when it exceeds the preset's /fsx budget."""
    est = storage_estimate(p)
    if est.total_gb > p.storage.fsx_budget_gb:
        raise UsageError(
            f"this run would leave {est.summary()}, over its {p.storage.fsx_budget_gb:.0f} GB budget: "
            "raise --fsx-budget-gb or export less often (a larger ckpt_interval)"
        )
    return est


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
    """Training tokens/s per GPU of a `params_b` model and where from; None without a GPU result."""
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
