"""What a SkyRL preset must satisfy before anything is submitted: sizes that split, a layout the
instance holds, and the known SkyRL traps refused in one line each (`rlkit submit`, the dry
run, `--rayjob` and `rlkit preflight` all build their preset through these checks).

The traps (findings.md, "Known failure modes"):
- resume at an epoch boundary: SkyRL resumes at `start_epoch = global_step // len(dataloader)`
  (`skyrl/train/trainer.py:284` in 0.4.0), the pattern verl fixed in PRs 5725 and 7401 after
  silent zero-step resumes; one epoch of fresh rows is the whole run, so there is no boundary;
- thinking models: SkyRL's VLM generator slices each observation out of a re-rendered
  conversation and assumes the sampled ids come back unchanged
  (`skyrl_vlm_generator.py:127-150`, its own comment), which a thinking template's stripped
  `<think>` blocks break;
- temperature or top-p other than 1: SkyRL keeps vLLM's raw logprobs, taken after vLLM's
  temperature and top-p, while its trainer only divides logits by the temperature; the
  importance ratio is then biased. Truncated importance sampling (TIS, the recipe's
  `tis_ratio_type`) corrects for it, so only with TIS on may they differ from 1;
- a recipe switch SkyRL has no counterpart for (`Recipe.refusals("skyrl")`).

And the token budget (`check_budget`, at plan time: it may read the checkpoint's tokenizer):
an answer budget that cannot hold the canonical answer, a turn budget that cannot fit
`max_input_length` even with canonical answers, or a turn `max_model_len` cannot hold
(`rlkit.model.budget_report`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.skyrl.instances import check_layout, instance_type
from rlkit.cluster.skyrl.start import model_state, task_view
from rlkit.env.maze_env import EnvConfig, env_for_set
from rlkit.errors import UsageError
from rlkit.model.budget_report import BudgetReport, budget_report
from rlkit.model.budgets import QWEN_ASSUMED, TINY_ASSUMED

if TYPE_CHECKING:
    from rlkit.cluster.skyrl.presets import SkyRLPreset

DEVICES = ("cuda", "cpu")
LR_SCHEDULES = ("constant_with_warmup", "constant", "cosine", "linear")
"""The `transformers` schedulers SkyRL's FSDP strategy builds from a rate, warmup and step count
alone (others need arguments SkyRL does not pass)."""
EVAL_PROTOCOLS = ("seed", "sampled", "both")
"""`SkyEval.eval_protocol`: the seed's greedy one-sample eval, the sampled k-sample one, or both."""


def refuse_known_traps(p: SkyRLPreset) -> None:
    """One-line UsageErrors for the SkyRL traps in this module's docstring."""
    if p.batch.epochs != 1:
        raise UsageError(
            f"epochs ({p.batch.epochs}) must be 1: SkyRL's resume (global_step // len(dataloader)) "
            "can silently skip an epoch at its boundary; raise steps instead (rows are fresh)"
        )
    if p.model.model_path.rstrip("/").lower().endswith("-thinking"):
        raise UsageError(
            f"{p.model.model_path} is a thinking model: SkyRL's VLM generator assumes re-rendering "
            "returns the sampled ids, which thinking templates break; use the -Instruct model"
        )
    p.recipe.check_skyrl()
    for name in ("temperature", "top_p"):
        if getattr(p.batch, name) != 1.0 and p.recipe.tis_ratio_type is None:
            raise UsageError(
                f"{name} ({getattr(p.batch, name)}) must be 1.0 unless TIS is on: SkyRL trains on "
                "vLLM's raw logprobs, which are biased otherwise; set tis_ratio_type=token"
            )


def set_view(eval_set: str, cell_px: int | None = None) -> EnvConfig:
    """The env config a run's rows carry: the set's, its picture drawn at `cell_px` when given
    (the preset's `cell_px`, walls scaled with it; the entry writes the rows with the same
    call)."""
    cfg = env_for_set(eval_set)
    if cell_px is None or cell_px == cfg.style.cell_px:
        return cfg
    if not 4 <= cell_px <= 128:
        raise UsageError(f"cell_px ({cell_px}) must be 4..128 pixels a square (None: the set's)")
    wall = max(1, round(cfg.style.wall_px * cell_px / cfg.style.cell_px))  # the view scales
    return replace(cfg, style=replace(cfg.style, cell_px=cell_px, wall_px=wall))


def check_eval(p: SkyRLPreset) -> None:
    """The eval settings: a known protocol on 1..64 mazes, a sampled one that samples."""
    e = p.eval
    if e.eval_protocol not in EVAL_PROTOCOLS:
        raise UsageError(
            f"eval_protocol {e.eval_protocol!r} must be one of {', '.join(EVAL_PROTOCOLS)}"
        )
    if not 1 <= e.eval_mazes <= 64:
        raise UsageError(f"eval_mazes ({e.eval_mazes}) must be 1..64 (a pinned set)")
    game = set_view(p.task.eval_set).parser.startswith("visgym")
    for name in p.eval_set_names[1:]:
        # an unknown set, or a view (cell_px) the set cannot be drawn at, fails here
        if set_view(name, p.task.cell_px).parser.startswith("visgym") != game:
            raise UsageError(
                f"eval_sets: {name} is another game than eval_set {p.task.eval_set}: "
                "evaluate sets of the game the run trains on"
            )
    if e.eval_protocol != "seed" and (e.eval_samples < 1 or e.eval_temperature <= 0):
        raise UsageError(
            f"the sampled eval needs eval_samples >= 1 ({e.eval_samples}) and eval_temperature "
            f"> 0 ({e.eval_temperature}): a greedy eval is eval_protocol=seed"
        )


STEP_WISE_ESTIMATORS = ("grpo", "rloo", "maxrl", "gigpo")
"""Estimators SkyRL's step-wise training takes (`validate_cfg` refuses gae and reinforce++;
rlkit's `gigpo`, `rlkit.cluster.skyrl.gigpo`, needs it)."""


def check_history(p: SkyRLPreset) -> None:
    """A history window: >= 1 turns, and a recipe SkyRL's step-wise training (one row a turn)
    accepts."""
    h = p.task.history
    if h is None:
        if p.recipe.advantage_estimator == "gigpo":
            raise UsageError(
                "advantage_estimator=gigpo gives each turn its own advantage, which SkyRL trains "
                "as a row a turn: set history (the turns a prompt keeps, e.g. history=2)"
            )
        return
    if h < 1:
        raise UsageError(f"history ({h}) must be >= 1 turns, or none for the whole conversation")
    est = p.recipe.advantage_estimator
    if est not in STEP_WISE_ESTIMATORS:
        raise UsageError(
            f"history={h} trains one row a turn (SkyRL's step-wise training), which SkyRL 0.4.0 "
            f"runs with {', '.join(STEP_WISE_ESTIMATORS)}, not advantage_estimator={est}"
        )
    if p.recipe.apply_overlong_filtering:
        raise UsageError(
            f"history={h} with apply_overlong_filtering: the window's rows mark each turn the "
            "episode went on past (stop_reason next_turn), which SkyRL's filter would mask; "
            "turn one of them off"
        )
    if p.recipe.loss_reduction == "token_mean_legacy":
        raise UsageError(
            f"history={h} (step-wise rows) with loss_reduction=token_mean_legacy is refused by "
            "SkyRL 0.4.0: use token_mean"
        )


def check_tuning(p: SkyRLPreset) -> None:
    """What SkyRL 0.4.0 cannot do with the model's `Tuning` (its values are checked in
    `rlkit.model.config.check_tuning`): freeze weights without LoRA (its FSDP trainer has no
    such switch; only Megatron's freeze_moe_router and freeze_dsa_indexer exist), or LoRA on
    the CPU path, whose weight sync is the delta backend (CUDA IPC needs CUDA), which SkyRL's
    `validate_cfg` refuses with LoRA."""
    m = p.model
    if m.lora_rank == 0 and m.freeze_vision != "none":
        raise UsageError(
            f"freeze_vision={m.freeze_vision} without LoRA: SkyRL 0.4.0's FSDP trainer has no "
            "switch to freeze weights; set lora_rank > 0 (its adapters then skip the vision "
            "modules) or freeze_vision=none"
        )
    if m.lora_rank > 0 and p.layout.device == "cpu":
        raise UsageError(
            f"lora_rank={m.lora_rank} on a CPU preset: SkyRL 0.4.0's CPU path syncs weights with "
            "the delta backend, which its validate_cfg refuses with LoRA ('Delta weight sync is "
            "not yet supported for LoRA'); try LoRA on the local backend or a GPU preset"
        )


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


def check_preset(p: SkyRLPreset) -> None:
    """Every check of a preset, each a one-line UsageError that says what to change."""
    task_view(p.task)  # an unknown set, a bad view or format fails here, not on the cluster
    model_state(p.model.model_path)
    check_eval(p)
    check_history(p)
    check_tuning(p)
    for name, value in (
        ("nodes", p.layout.nodes),
        ("group_size", p.batch.group_size),
        ("mini_batches", p.batch.mini_batches),
        ("steps", p.batch.steps),
    ):
        if value < 1:
            raise UsageError(f"{name} ({value}) must be >= 1")
    if p.layout.gpus_per_node is not None and p.layout.gpus_per_node < 1:
        raise UsageError(f"gpus_per_node ({p.layout.gpus_per_node}) must be >= 1 (or none: all)")
    if p.batch.group_size < 2:
        raise UsageError(f"group_size ({p.batch.group_size}) must be >= 2: GRPO compares a group")
    if p.layout.mm_cache_gb < 0:
        raise UsageError(f"mm_cache_gb ({p.layout.mm_cache_gb}) must be >= 0 (0: no cache)")
    if p.layout.device not in DEVICES:
        raise UsageError(f"device {p.layout.device!r} must be one of {', '.join(DEVICES)}")
    if p.batch.lr_schedule not in LR_SCHEDULES:
        raise UsageError(
            f"lr_schedule {p.batch.lr_schedule!r} must be one of {', '.join(LR_SCHEDULES)}"
        )
    refuse_known_traps(p)
    if p.layout.instance_type is None:
        if p.layout.gpus_per_node is None:
            raise UsageError("a preset without instance_type must set gpus_per_node")
    else:
        inst = instance_type(p.layout.instance_type)
        check_layout(
            inst, p.node_gpus, p.layout.nodes, p.model.model_params_b, p.layout.driver_memory_gb
        )
    _check_batches(p)


def _check_batches(p: SkyRLPreset) -> None:
    gpus = p.node_gpus
    if gpus % p.layout.tensor_parallel_size:
        raise UsageError(
            f"gpus_per_node ({gpus}) must be a multiple of tensor_parallel_size "
            f"({p.layout.tensor_parallel_size}): colocate_all needs policy GPUs == engines x TP"
        )
    if p.batch.prompts_per_node % p.batch.mini_batches:
        raise UsageError(
            f"prompts_per_node ({p.batch.prompts_per_node}) must divide into "
            f"mini_batches ({p.batch.mini_batches})"
        )
    per_gpu = p.batch.prompts_per_node // p.batch.mini_batches * p.batch.group_size
    if per_gpu % gpus or (per_gpu // gpus) % p.batch.micro_batch_per_gpu:
        raise UsageError(
            f"a mini batch of {per_gpu} episodes per node must split into {gpus} GPUs x "
            f"micro batches of {p.batch.micro_batch_per_gpu}; change prompts_per_node or "
            "micro_batch_per_gpu"
        )


def model_files(model_path: str) -> Path | None:
    """The checkpoint's directory on this machine (a path, or the HF cache's snapshot of a hub
    id), None when it is not here (the 8B on the hub or on /fsx, seen from a laptop)."""
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
    """The token budget of `p`'s model on its eval set (its training rows are the same family;
    of several, `eval_sets`, the one with the most turns): read from `model_dir` (True: wherever
    `model_files` finds the checkpoint; None or False: nowhere), else from the assumed values of
    rlkit's tiny model or Qwen3-VL."""
    from rlkit.cluster.skyrl.presets import TINY_WARM  # presets imports this module

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
    """Tokens per answer: the preset's `max_generate_length`, or where it is None the canonical
    answer's length in the model's tokenizer plus room (`rlkit.model.budgets.ANSWER_ROOM`)."""
    if p.task.max_generate_length is not None:
        return p.task.max_generate_length
    return preset_budget(p).budget.answer


def check_budget(p: SkyRLPreset) -> BudgetReport:
    """The preset's budget report, or a one-line UsageError naming the knob when its turn budget
    cannot fit (the dry run, `rlkit submit` and `rlkit preflight` call it before anything runs)."""
    report = preset_budget(p)
    report.check()
    return report
