"""SkyRL presets (`get_preset`) and every check a preset must pass before anything is submitted.
The SkyRL traps refused here: docs/skyrl-integration.md#presets-and-their-overrides-presetspy-overridespy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from rlkit.cluster.hang import HangRules
from rlkit.cluster.skyrl.preset_sections import (
    InstanceType,
    PodShape,
    SkyBatch,
    SkyEval,
    SkyLayout,
    SkyModel,
    SkyStorage,
    SkyTask,
    check_layout,
    instance_type,
    model_state,
    pod_shape,
    set_view,
    task_view,
)
from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.recipe import Recipe, check_capture
from rlkit.settings import CaptureConfig, apply_settings, build_config, resolve_key

CLUSTER_RECIPE = Recipe(kl_loss_coef=0.005)
"""SkyRL's defaults with its visgym recipe's KL coefficient, `token_mean` reduction."""
TINY_WARM = "rlkit:tiny-warm"
"""`model_path` of rlkit's tiny Qwen3-VL, built and warm-started by the job into RUN/init_model."""
DEVICES = ("cuda", "cpu")
LR_SCHEDULES = ("constant_with_warmup", "constant", "cosine", "linear")
"""The `transformers` schedulers SkyRL builds from a rate, warmup and step count alone."""
EVAL_PROTOCOLS = ("seed", "sampled", "both")
STEP_WISE_ESTIMATORS = ("grpo", "rloo", "maxrl", "gigpo")
"""Estimators SkyRL's step-wise training (a history window) takes."""


@dataclass(frozen=True)
class SkyRLPreset:
    """A SkyRL GRPO recipe for the maze env, one section per concern; set a field by its own
    name or dotted path (`rlkit.settings.apply_settings`)."""

    KEY_NOUN = "SkyRL preset setting"  # what `rlkit.settings.resolve_key` calls an unknown one

    model: SkyModel = field(default_factory=SkyModel)
    layout: SkyLayout = field(default_factory=SkyLayout)
    batch: SkyBatch = field(default_factory=SkyBatch)
    task: SkyTask = field(default_factory=SkyTask)
    eval: SkyEval = field(default_factory=SkyEval)
    storage: SkyStorage = field(default_factory=SkyStorage)
    recipe: Recipe = CLUSTER_RECIPE
    """The algorithm switches (`rlkit.recipe`), shared with the local trainer."""
    hang: HangRules = field(default_factory=HangRules)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    """Training rollouts kept under RUN/rollouts/."""

    def __post_init__(self) -> None:
        check_preset(self)
        check_capture(self.capture.groups, self.recipe.advantage_estimator)

    def to_json(self) -> str:
        """The preset as one JSON object (the entry's `--config`)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SkyRLPreset:
        """The preset `to_json` wrote, checked again; an unknown setting is a UsageError."""
        try:
            return build_config(cls, json.loads(text))
        except UsageError as e:
            raise UsageError(
                f"the job's preset: {e}; a client newer than the job's image: rebuild the "
                "runtime image from the client's checkout"
            ) from None

    @property
    def node_gpus(self) -> int:
        """GPUs the run takes on each node: gpus_per_node, else all of the instance's."""
        if self.layout.gpus_per_node is not None:
            return self.layout.gpus_per_node
        return self.instance.gpus if self.instance else 1

    @property
    def instance(self) -> InstanceType | None:
        name = self.layout.instance_type
        return instance_type(name) if name else None

    @property
    def pod(self) -> PodShape | None:
        """The worker pod on each node (None without an instance: a CPU host)."""
        inst = self.instance
        return pod_shape(inst, self.node_gpus, self.layout.nodes) if inst else None

    @property
    def num_gpus(self) -> int:
        return self.layout.nodes * self.node_gpus

    @property
    def prompts_per_step(self) -> int:
        return self.batch.prompts_per_node * self.layout.nodes

    @property
    def train_rows(self) -> int:
        """One epoch is the whole run, so SkyRL's epoch-end save is the final one."""
        return self.batch.steps * self.prompts_per_step

    @property
    def eval_episodes(self) -> int:
        """Episodes of one eval: one a maze (seed), `eval_samples` a maze (sampled), or both."""
        e = self.eval
        seed = e.eval_mazes if e.eval_protocol != "sampled" else 0
        return seed + (e.eval_mazes * e.eval_samples if e.eval_protocol != "seed" else 0)

    @property
    def eval_set_names(self) -> tuple[str, ...]:
        """The sets every eval plays: `eval_set` first, then the others of `eval_sets`."""
        named = [s.strip() for s in (self.eval.eval_sets or "").split(",") if s.strip()]
        return tuple(dict.fromkeys([self.task.eval_set, *named]))

    @property
    def turn_budgets(self) -> dict[str, int]:
        """Turn budget by eval set: `max_turns` for `eval_set`, each other set its own."""
        first, *others = self.eval_set_names
        return {first: self.task.max_turns} | {s: env_for_set(s).max_turns for s in others}

    @property
    def turn_limit(self) -> int:
        """The most turns an episode may take: SkyRL's `generator.max_turns`."""
        return max(self.turn_budgets.values())

    @property
    def images_per_episode(self) -> int:
        """vLLM's per-prompt image limit: one a turn plus the first, at most `history`."""
        every = self.turn_limit + 1
        return every if self.task.history is None else min(every, self.task.history)


def refuse_known_traps(p: SkyRLPreset) -> None:
    """One-line UsageErrors for SkyRL's known traps (docs/skyrl-integration.md)."""
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


def check_eval(p: SkyRLPreset) -> None:
    """A known protocol on 1..64 mazes of one game; a sampled one that samples."""
    e = p.eval
    if e.eval_protocol not in EVAL_PROTOCOLS:
        raise UsageError(
            f"eval_protocol {e.eval_protocol!r} must be one of {', '.join(EVAL_PROTOCOLS)}"
        )
    if not 1 <= e.eval_mazes <= 64:
        raise UsageError(f"eval_mazes ({e.eval_mazes}) must be 1..64 (a pinned set)")
    game = set_view(p.task.eval_set).parser.startswith("visgym")
    for name in p.eval_set_names[1:]:
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


def check_history(p: SkyRLPreset) -> None:
    """A history window: >= 1 turns, and a recipe SkyRL's step-wise training accepts."""
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
    """What SkyRL 0.4.0 cannot do: freeze weights without LoRA, or LoRA on the CPU path."""
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
    if p.layout.instance_type is None and p.layout.gpus_per_node is None:
        raise UsageError("a preset without instance_type must set gpus_per_node")
    if p.layout.instance_type is not None:  # "" too: an unknown type, refused by name
        m = p.model.model_params_b
        inst = instance_type(p.layout.instance_type)
        check_layout(inst, p.node_gpus, p.layout.nodes, m, p.layout.driver_memory_gb)
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


def _preset(**changes: object) -> SkyRLPreset:
    return apply_settings(SkyRLPreset(), changes)


PRESETS: dict[str, SkyRLPreset] = {
    "qwen3vl-8b": SkyRLPreset(),  # every GPU of the node (billed whole); the seed's eval
    "qwen3vl-8b-6gpu": _preset(gpus_per_node=6),  # the seed's layout: 6 of a 48xlarge's 8
    # the whole cluster path in minutes: one node, a 2B model, 3 steps, one checkpoint
    "qwen3vl-2b-smoke": _preset(
        model_path="Qwen/Qwen3-VL-2B-Instruct",
        model_params_b=2.1,
        prompts_per_node=12,
        mini_batches=1,
        steps=3,
        eval_protocol="sampled",
        eval_mazes=8,
        eval_samples=2,
        eval_interval=3,
        ckpt_interval=3,
        max_ckpts_to_keep=1,
        fsx_budget_gb=100.0,
        driver_memory_gb=16,  # fits even an ml.g7e.2xlarge pod
    ),
    # SkyRL's own trainer on this machine's CPUs: the tiny model on `test`, 2 FSDP ranks beside
    # 2 vLLM engines on a local head's logical GPUs; why each value: docs/cluster.md
    "skyrl-tiny-cpu": _preset(
        model_path=TINY_WARM,
        model_params_b=0.001,
        instance_type=None,
        gpus_per_node=2,
        group_size=4,
        eval_set="test",
        max_turns=env_for_set("test").max_turns,
        prompts_per_node=4,
        mini_batches=1,
        micro_batch_per_gpu=4,
        lr=3e-4,
        lr_schedule="cosine",
        recipe=replace(CLUSTER_RECIPE, loss_reduction="sequence_mean"),
        steps=6,
        eval_protocol="sampled",
        eval_mazes=16,
        eval_samples=2,
        eval_interval=3,
        ckpt_interval=3,
        max_ckpts_to_keep=2,
        cell_px=8,
        max_model_len=3072,
        max_input_length=3000,
        max_generate_length=None,
        max_prompt_length=512,
        driver_memory_gb=0,
        fsx_budget_gb=1.0,
        runs_root="runs/skyrl",
        hang_minutes=0,
        device="cpu",
        kv_cache_gb=0.25,
        mm_cache_gb=0.25,
        dataloader_workers=0,
    ),
}


def get_preset(
    name: str, *, recipe: Recipe | Mapping[str, object] | None = None, **changes: object
) -> SkyRLPreset:
    """Preset `name` with `changes` (settings by name or dotted path) and `recipe` (a Recipe, or
    switch -> value changes); another `eval_set` brings its turn budget unless `max_turns` is."""
    if name not in PRESETS:
        raise UsageError(f"unknown SkyRL preset {name!r}; choose from {', '.join(PRESETS)}")
    base = PRESETS[name]
    if isinstance(recipe, Mapping):
        changes = {f"recipe.{k.removeprefix('recipe.')}": v for k, v in recipe.items()} | changes
    elif recipe is not None:
        changes = {"recipe": recipe, **changes}
    keyed = {resolve_key(base, key): value for key, value in changes.items()}
    set_key, turns_key = resolve_key(base, "eval_set"), resolve_key(base, "max_turns")
    eval_set = keyed.get(set_key, base.task.eval_set)
    if eval_set != base.task.eval_set and turns_key not in keyed:
        keyed[turns_key] = env_for_set(str(eval_set)).max_turns
    return apply_settings(base, keyed)
