"""SkyRL on a GPU cluster: presets (`get_preset`); `rlkit.cluster.skyrl.overrides` turns one into
SkyRL config overrides and the command a Ray job runs.

rlkit does not re-implement SkyRL's trainer. A preset is turned into SkyRL's own
`key=value` overrides (parsed by `SkyRLTrainConfig.from_cli_overrides` inside the job), and
the job runs `python -m rlkit.cluster.skyrl.entry --config PRESET_JSON -- <overrides...>`, which
writes the rows, registers the maze env and starts SkyRL's experiment. `rlkit.run` (`open_run`) reads what SkyRL writes (checkpoints, eval
dumps) into rlkit's types, so plots and replays work the same for cluster runs.

    rlkit submit --preset qwen3vl-8b-6gpu --address http://127.0.0.1:8265 --dry-run

Run directory on shared storage (`/fsx/rlkit/runs/<run>` by default), the same top-level
layout as a local run: SkyRL's `ckpt_path` *is* the run dir, so `global_step_N/` and
`latest_ckpt_global_step.txt` land where rlkit's readers and plots look; `data/` holds the
parquet rows, `exports/` the HF exports and `exports/dumped_evals/`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from rlkit.cluster.hang import HangRules
from rlkit.cluster.skyrl.instances import InstanceType, PodShape, instance_type, pod_shape
from rlkit.cluster.skyrl.preset_checks import check_preset
from rlkit.cluster.skyrl.preset_sections import (
    SkyBatch,
    SkyEval,
    SkyLayout,
    SkyModel,
    SkyStorage,
    SkyTask,
)
from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.recipe import Recipe, check_capture
from rlkit.settings import CaptureConfig, apply_settings, build_config, resolve_key

CLUSTER_RECIPE = Recipe(kl_loss_coef=0.005)
"""The cluster presets' algorithm switches: SkyRL's defaults (GRPO, token_mean, the symmetric
clip 0.2, k3 KL as a loss term) with SkyRL's visgym recipe's KL coefficient 0.005, which keeps
answers well-formed. Departure from that recipe: `token_mean` instead of its
`token_mean_legacy`, which averages per-micro-batch token means with equal weight, so the
objective changed with `micro_batch_per_gpu` and GPU count; `token_mean` is the local
trainer's reduction too, the same value whether a row is a turn or an episode
(tests/skyrl/test_objective.py)."""
TINY_WARM = "rlkit:tiny-warm"
"""`model_path` of the CPU preset: rlkit's tiny Qwen3-VL, built offline and warm-started
(free-form behaviour cloning to a ~40% solve rate, as the local recipe starts GRPO) by the
job's entry into RUN/init_model, once per run."""


@dataclass(frozen=True)
class SkyRLPreset:
    """A SkyRL GRPO recipe for the maze env. Start: SkyRL's `examples/train/visgym` recipe.

    One section per concern (`rlkit.cluster.skyrl.preset_sections`); departures from that
    recipe are stated on the field they touch. Set a field by its own name (`prompts_per_node`,
    `capture_groups` for `capture.groups`) or its dotted path: `rlkit.settings.apply_settings`.
    """

    KEY_NOUN = "SkyRL preset setting"  # what `rlkit.settings.resolve_key` calls an unknown one

    model: SkyModel = field(default_factory=SkyModel)
    layout: SkyLayout = field(default_factory=SkyLayout)
    batch: SkyBatch = field(default_factory=SkyBatch)
    task: SkyTask = field(default_factory=SkyTask)
    eval: SkyEval = field(default_factory=SkyEval)
    storage: SkyStorage = field(default_factory=SkyStorage)
    recipe: Recipe = CLUSTER_RECIPE
    """The algorithm switches (`rlkit.recipe`), shared with the local trainer's config;
    `get_preset(name, recipe={...})` or a switch by name changes them."""
    hang: HangRules = field(default_factory=HangRules)
    """HyperPod hang detection (`rlkit.cluster.hang`): `hang_minutes`, `hang_start_minutes`,
    `hang_action`."""
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    """Training rollouts kept under RUN/rollouts/ (`capture_groups`, `capture_keep`), captured
    by `rlkit.cluster.skyrl.capture`."""

    def __post_init__(self) -> None:
        check_preset(self)  # one-line UsageErrors: sizes, the instance's layout, SkyRL's traps
        check_capture(self.capture.groups, self.recipe.advantage_estimator)

    def to_json(self) -> str:
        """The preset as one JSON object: what its SkyRL job receives (the entry's `--config`)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SkyRLPreset:
        """The preset `to_json` wrote, checked again; a setting this rlkit does not know (a
        client newer than the job's image) is a one-line UsageError."""
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
        inst = self.instance
        return inst.gpus if inst else 1

    @property
    def instance(self) -> InstanceType | None:
        name = self.layout.instance_type
        return instance_type(name) if name else None

    @property
    def pod(self) -> PodShape | None:
        """The worker pod on each node (None for a preset without an instance: a CPU host)."""
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
        """One epoch = the whole run, so SkyRL's epoch-end save is the final one."""
        return self.batch.steps * self.prompts_per_step

    @property
    def eval_episodes(self) -> int:
        """Episodes of one eval: a greedy one a maze for the seed's protocol, `eval_samples`
        a maze for the sampled one, both for `both`."""
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
        """Turn budget by eval set: `max_turns` for `eval_set` (and training), each other
        set its own (a set's budget is part of its difficulty)."""
        first, *others = self.eval_set_names
        return {first: self.task.max_turns} | {s: env_for_set(s).max_turns for s in others}

    @property
    def turn_limit(self) -> int:
        """The most turns an episode of the run may take: SkyRL's `generator.max_turns`."""
        return max(self.turn_budgets.values())

    @property
    def images_per_episode(self) -> int:
        """vLLM's per-prompt image limit: the env shows one image per turn plus the first, and
        a history window keeps its last `history` of them."""
        every = self.turn_limit + 1
        return every if self.task.history is None else min(every, self.task.history)


def _preset(**changes: object) -> SkyRLPreset:
    """The default preset with `changes` by field name (`rlkit.settings.apply_settings`)."""
    return apply_settings(SkyRLPreset(), changes)


PRESETS: dict[str, SkyRLPreset] = {
    # every GPU of the node: the default (billed whole); the seed's eval protocol (greedy, one
    # sample a maze, before training); `--set eval_protocol=both` adds the sampled one
    "qwen3vl-8b": SkyRLPreset(),
    "qwen3vl-8b-6gpu": _preset(gpus_per_node=6),  # the seed's layout: 6 of a 48xlarge's 8
    # The whole cluster path in minutes before the 8B run: one node, a 2B model, 3 steps,
    # an eval of 8 mazes before training and at the end, one checkpoint and export.
    "qwen3vl-2b-smoke": _preset(
        model_path="Qwen/Qwen3-VL-2B-Instruct",
        model_params_b=2.1,
        # every GPU of the node, the 8B presets' default layout, rehearsed
        prompts_per_node=12,
        mini_batches=1,
        steps=3,
        eval_protocol="sampled",  # a few mazes, sampled: the path, not the number
        eval_mazes=8,
        eval_samples=2,
        eval_interval=3,
        ckpt_interval=3,
        max_ckpts_to_keep=1,
        fsx_budget_gb=100.0,
        driver_memory_gb=16,  # 12 mazes' pixel values; fits even an ml.g7e.2xlarge pod
    ),
    # SkyRL's own trainer on this machine's CPUs (the cluster's code path, rehearsed): rlkit's
    # tiny Qwen3-VL on the `test` mazes, 2 FSDP ranks colocated with 2 vLLM engines on a local
    # head's logical GPUs. Same build_overrides as above; only model, sizes and device differ.
    # It stays on `test`, not VisGym's: the job warm-starts the tiny model on rlkit's cell mazes
    # in its 8 px ego view (rlkit.train.warm_model), the view its 2-layer policy can read, and a
    # 12-turn `test` episode is a fraction of an 18-turn VisGym one. `--set eval_set=visgym-easy`
    # plays the seed's task on the same path, drawn at 8 px (cell_px; 72 px, 16 image tokens).
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
        # the local recipe's early rate: at 1e-4 (one optimizer step a batch of 128 episodes)
        # the eval on 64 test mazes x 4 moved 38.3% -> 43.0% -> 41.4% over 20 steps
        # (benchmarks/bench_skyrl_learning.py)
        lr=3e-4,
        # constant, the eval peaked at step 30 (+21.5 points) and fell back to +10.9 at step 40
        # (KL to the reference ~0.5): the rate decays to 0 over the run instead
        lr_schedule="cosine",
        # each episode weighs the same in the loss: under token_mean a failed episode (more
        # turns, more tokens, a negative advantage) outweighs its group's solved ones, and the
        # tiny model's answer format, shared by both, was pushed down (lr 3e-4: malformed
        # answers 0.9 -> 4.3 an episode by step 5, eval 34.4% -> 29.3% at step 10)
        recipe=replace(CLUSTER_RECIPE, loss_reduction="sequence_mean"),
        steps=6,
        eval_protocol="sampled",
        eval_mazes=16,
        eval_samples=2,
        eval_interval=3,
        ckpt_interval=3,
        max_ckpts_to_keep=2,
        cell_px=8,  # `test`'s own; VisGym's mazes drawn small enough for the tiny model
        # visgym-easy's 18 turns at 8 px fit (the dry run prints them); a `test` episode stays
        # far below, so the larger budget costs it nothing; both under the tiny model's 4,096
        max_model_len=3072,
        max_input_length=3000,
        # the canonical answer + room, from the checkpoint's tokenizer: 8 with the tiny model,
        # 12 with a Qwen-vocabulary checkpoint (--model DIR); a real Qwen3-VL processor sees the
        # `test` set's 48 px view upscaled to 256 px (64 tokens; the dry run prints it)
        max_generate_length=None,
        max_prompt_length=512,
        driver_memory_gb=0,
        fsx_budget_gb=1.0,
        runs_root="runs/skyrl",
        hang_minutes=0,
        device="cpu",
        kv_cache_gb=0.25,
        mm_cache_gb=0.25,  # 64 episodes an engine x 13 pictures x 55 kB of pixels: ~46 MB
        dataloader_workers=0,
    ),
}


def get_preset(
    name: str, *, recipe: Recipe | Mapping[str, object] | None = None, **changes: object
) -> SkyRLPreset:
    """Preset `name` with `changes` (settings by name or dotted path, recipe switches among
    them: `rlkit.settings.apply_settings`) and `recipe` (a whole Recipe, or switch -> value
    changes to the preset's own); a switch SkyRL cannot honour, and every preset check, is a
    one-line UsageError. Another `eval_set` brings its own turn budget unless `max_turns` is
    given too (a set's budget is part of its difficulty)."""
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
        keyed[turns_key] = env_for_set(str(eval_set)).max_turns  # the set's own budget
    return apply_settings(base, keyed)
