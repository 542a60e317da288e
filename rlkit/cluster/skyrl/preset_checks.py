"""What the dry run, `rlkit submit` and preflight check of a SkyRL preset at plan time: its token
budget (`check_budget`), what it leaves on /fsx (`check_storage`), and the dry run's start and
eval lines. The checks every preset passes when built are in `presets`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rlkit.cluster.skyrl.preset_sections import model_state, task_view
from rlkit.cluster.skyrl.presets import TINY_WARM, SkyRLPreset
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
    """The token budget of `p`'s model on its eval set with the most turns, from `model_dir`
    (True: wherever `model_files` finds it), else from the assumed values."""
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


def lora_params_b(p: SkyRLPreset) -> float:
    """The adapter's parameters in billions (0 with LoRA off)."""
    return p.model.lora_rank * LORA_PARAMS_PER_RANK_PER_B * p.model.model_params_b / 1e9


def storage_estimate(p: SkyRLPreset) -> StorageEstimate:
    """What `p` leaves on /fsx: a checkpoint and an export every `ckpt_interval` steps and at
    the end, the last `max_ckpts_to_keep` checkpoints kept."""
    every = p.storage.ckpt_interval
    saves = len({*range(every, p.batch.steps + 1, every), p.batch.steps})
    params, adapter = p.model.model_params_b, lora_params_b(p)
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
