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
from dataclasses import asdict, dataclass, fields, replace

from rlkit.cluster.hang import HangRules
from rlkit.cluster.skyrl.instances import (
    DEFAULT_INSTANCE,
    InstanceType,
    PodShape,
    instance_type,
    pod_shape,
)
from rlkit.cluster.skyrl.preset_checks import check_preset
from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.settings import CaptureConfig, apply_settings, resolve_key
from rlkit.train.config import WarmStartConfig

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

    Departures from that recipe are stated on the field they touch.
    """

    KEY_NOUN = "SkyRL preset setting"  # what `rlkit.settings.resolve_key` calls an unknown one

    model_path: str = "Qwen/Qwen3-VL-8B-Instruct"
    """HF id or a path on /fsx (pre-download to /fsx to spare every node the download); or
    `rlkit:tiny-warm` (TINY_WARM), the tiny model the job builds for itself."""
    model_params_b: float = 8.8
    """Parameters in billions (Qwen3-VL-8B: 8.77 B): sizes the /fsx estimate."""
    instance_type: str | None = DEFAULT_INSTANCE
    """HyperPod instance of the GPU workers (`rlkit.cluster.skyrl.instances.G7E`): sizes the
    worker pod, and refuses a layout it cannot hold. None: no instance (a CPU host)."""
    gpus_per_node: int | None = None
    """GPUs the run takes on each node; None (the default): all of the instance's. HyperPod
    bills a node whole and no ml.g7e size has 6 GPUs, so a 6-of-8 layout pays for 2 idle GPUs
    and its step takes ~8/6 as long at the same batch; `qwen3vl-8b-6gpu` keeps the seed's
    6-GPU layout only to reproduce its batch split (the dry run's cost lines show both)."""
    nodes: int = 1
    """Policy and vLLM engines span this many nodes; batch sizes scale with it."""
    tensor_parallel_size: int = 1
    """8B in bf16 fits one 96 GB GPU with its KV cache: one vLLM engine per GPU."""
    group_size: int = 8
    """GRPO group: episodes sampled per maze; advantages compare within a group."""
    eval_set: str = "visgym-easy"
    """Pinned maze set for the eval split; training rows come from its family on a disjoint seed
    stream. The seed's task: VisGym's `maze_2d/easy` (9x9 squares, seeds 0..63, `stop` on the
    red target), so a cluster eval compares with the seed's 43.75% and SkyRL's recipe. The rows
    carry the set's env config (VisGym's 225 px picture and rules, SkyRL's answer format), so
    the model sees the task `rlkit eval --set` plays. `--set eval_set=test-large` plays rlkit's
    own 6x6-cell mazes instead (and takes that set's turn budget: `get_preset`)."""
    cell_px: int | None = None
    """Pixels per square (cell) of the rows' pictures; None: the eval set's own (VisGym's 25).
    Only the view scales: the mazes, positions and rules stay the set's. The tiny CPU preset
    draws 8 px, as `local-tiny-visgym` does: at VisGym's 25 px an 18-turn episode passes the
    tiny model's 4,096 positions."""
    max_turns: int = env_for_set("visgym-easy").max_turns
    """Turn budget: 18, SkyRL's recipe's (visgym-easy's shortest paths are 12-16 moves, so the
    shortest path plus `stop` always fits). A preset built for another eval set takes that set's
    own budget (`get_preset`), so a cluster eval and `rlkit eval` measure the same thing."""
    prompts_per_node: int = 36
    """Mazes per step per node. Departure from 32: on 6 (or 8, 4, 2) GPUs the mini batch must split
    evenly over GPUs (SkyRL asserts it); 36 prompts x 8 = 288 episodes per node and step."""
    mini_batches: int = 3
    """Optimizer steps per training batch (policy_mini_batch_size = prompts / this)."""
    micro_batch_per_gpu: int = 4
    """Sequences per forward/backward on one GPU; multi-turn VLM prompts are long."""
    lr: float = 1.0e-6
    """The recipe's rate: full fine-tuning of an 8B model drifts at higher rates."""
    lr_schedule: str = "constant_with_warmup"
    """SkyRL's `optimizer_config.scheduler` (a `transformers` SchedulerType): the rate over the
    run's optimizer steps. `cosine` falls from `lr` to 0 at the last step, as the local
    trainer's `grpo.lr_end` does: a constant high rate climbs fast but lets a late policy swing."""
    recipe: Recipe = CLUSTER_RECIPE
    """The algorithm switches (`rlkit.recipe`), shared with the local trainer's config;
    `get_preset(name, recipe={...})` or a switch by name changes them."""
    temperature: float = 1.0
    """Rollout sampling temperature; GRPO needs diverse groups. Only 1.0 unless TIS is on
    (`recipe.tis_ratio_type`): SkyRL trains on vLLM's raw logprobs
    (`preset_checks.refuse_known_traps`)."""
    top_p: float = 1.0
    """Rollout nucleus sampling; only 1.0 (as temperature) unless TIS is on."""
    epochs: int = 1
    """Passes over the rows. Only 1: SkyRL's resume is unsafe at an epoch boundary, and mazes
    are free, so a longer run takes more steps of fresh rows."""
    steps: int = 140
    """GRPO steps of the run. Departure from 20 epochs over 256 rows: SkyRL saves a checkpoint
    and an HF export at every epoch end besides its intervals, and never prunes exports (7
    steps an epoch -> ~34 exports, ~0.6 TB of /fsx for 140 steps). Mazes are free, so the run
    is one epoch of `steps x prompts per step` fresh rows (`train_rows`)."""
    eval_mazes: int = 64
    """Mazes of the eval set in the eval split (the first N; 64 = the whole pinned set)."""
    eval_interval: int = 10
    """Steps between evals on the eval split (dumped for rlkit's readers)."""
    eval_samples: int = 4
    """Samples per eval maze. Departure from 1: 64 single samples give a +-12 point CI. The
    seed's protocol (one greedy sample a maze, the 43.75% = 28/64) is
    `--set eval_samples=1 --set eval_temperature=0`; `rlkit eval` on such a run's dumps marks it
    `protocol: seed` and prints its exact interval."""
    eval_temperature: float = 1.0
    """Eval sampling temperature. SkyRL's default eval sampling is greedy (temperature 0), so k
    samples per maze would be k copies of one episode counted as k; `rlkit eval` samples at 1."""
    ckpt_interval: int = 10
    """Steps between resumable checkpoints (and HF exports at the same steps)."""
    max_ckpts_to_keep: int = 3
    """Full FSDP checkpoints of an 8B model are large; keep the last few."""
    max_model_len: int = 60000
    """vLLM context: images accumulate over turns."""
    max_input_length: int = 8192
    """Conversation tokens after which an episode is cut (stop_reason 'length')."""
    max_generate_length: int | None = 1024
    """Tokens per answer, its end of turn included. None: the canonical answer's length in the
    model's tokenizer plus room (`preset_checks.generate_length`: 4 + 4 with the tiny
    tokenizer, 8 + 4 with Qwen's). One that cannot hold the canonical answer is refused."""
    max_prompt_length: int = 2048
    gpu_memory_utilization: float = 0.8
    """vLLM's share of each GPU; the rest holds the sleeping FSDP policy."""
    attention_backend: str | None = None
    """vLLM attention backend, e.g. TRITON_ATTN for RTX PRO 6000 (sm_120). Passed as the
    engine's `attention_backend` (vLLM 0.30 no longer reads VLLM_ATTENTION_BACKEND)."""
    driver_memory_gb: int = 64
    """Ray memory the SkyRL trainer task reserves: it holds every rollout's pixel values, so it
    must land on a GPU worker (its pod: `pod`, checked to hold it), never on the head pod
    (32 GiB, deploy/raycluster.yaml)."""
    fsx_budget_gb: float = 1500.0
    """The dry run refuses a run whose estimated /fsx use (kept checkpoints + every export)
    exceeds this; raise it or export less often (ckpt_interval)."""
    logger: str = "console"
    """SkyRL tracker: console, wandb (forward WANDB_API_KEY), tensorboard, mlflow."""
    runs_root: str = "/fsx/rlkit/runs"
    """Shared storage visible to every node; the run dir is `<runs_root>/<run name>`."""
    hang_minutes: int = 30
    """HyperPod hang detection (rlkit.cluster.hang): no step line for this long is a hang;
    0 = off. Longer than the slowest step plus its eval."""
    hang_start_minutes: int = 60
    """Time to the first step line: model download, vLLM start-up, the step-0 eval."""
    hang_action: str = "notify"
    """What HyperPod does on a hang: notify, or cancel (the job fails and is resubmitted)."""
    device: str = "cuda"
    """cuda (the cluster) or cpu: SkyRL's own trainer on a CPU host, through rlkit's device
    seam (`rlkit.cluster.skyrl.cpu_seam`), on a local head offering logical GPUs: the cluster's
    code path rehearsed on a laptop. Only sizes and `device_overrides` differ."""
    warm_start_to: float = WarmStartConfig.stop_at
    """For `rlkit:tiny-warm`: the free sampled validation solve rate its warm start stops at
    (the local recipe's, like the 8B's 43.75% start: partial skill, so GRPO's groups differ)."""
    kv_cache_gb: float | None = None
    """vLLM's KV cache per engine in GiB; None sizes it by `gpu_memory_utilization` (GPUs).
    On a CPU the cache is host memory, and the utilization share would take most of it."""
    dataloader_workers: int | None = None
    """SkyRL's dataloader worker processes (None: SkyRL's 8). On a 2-core host their start-up
    took ~55 of an eval's ~60 s, while generating took 4-9 s."""
    capture_groups: int = CaptureConfig.groups
    """`rlkit.settings.CaptureConfig.groups`, captured by `rlkit.cluster.skyrl.capture`."""
    capture_keep: int | None = CaptureConfig.keep
    """`rlkit.settings.CaptureConfig.keep`."""

    def hang_rules(self) -> HangRules:
        return HangRules(self.hang_minutes, self.hang_start_minutes, self.hang_action)

    def __post_init__(self) -> None:
        check_preset(self)  # one-line UsageErrors: sizes, the instance's layout, SkyRL's traps
        self.capture.check_estimator(self.recipe.advantage_estimator)

    @property
    def capture(self) -> CaptureConfig:
        return CaptureConfig(self.capture_groups, self.capture_keep)

    def to_json(self) -> str:
        """The preset as one JSON object: what its SkyRL job receives (the entry's `--config`)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SkyRLPreset:
        """The preset `to_json` wrote, checked again; a setting this rlkit does not know (a
        client newer than the job's image) is a one-line UsageError."""
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known) + sorted(
            set(data.get("recipe", {})) - {f.name for f in fields(Recipe)}
        )
        if unknown:
            raise UsageError(
                f"the job's preset has settings this rlkit does not know ({', '.join(unknown)}): "
                "rebuild the runtime image from the client's checkout"
            )
        if "recipe" in data:
            data["recipe"] = Recipe(**data["recipe"])
        return cls(**data)

    @property
    def node_gpus(self) -> int:
        """GPUs the run takes on each node: gpus_per_node, else all of the instance's."""
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        return instance_type(self.instance_type).gpus if self.instance_type else 1

    @property
    def instance(self) -> InstanceType | None:
        return instance_type(self.instance_type) if self.instance_type else None

    @property
    def pod(self) -> PodShape | None:
        """The worker pod on each node (None for a preset without an instance: a CPU host)."""
        inst = self.instance
        return pod_shape(inst, self.node_gpus, self.nodes) if inst else None

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.node_gpus

    @property
    def prompts_per_step(self) -> int:
        return self.prompts_per_node * self.nodes

    @property
    def train_rows(self) -> int:
        """One epoch = the whole run, so SkyRL's epoch-end save is the final one."""
        return self.steps * self.prompts_per_step

    @property
    def images_per_episode(self) -> int:
        """The env shows one image per turn plus the first: vLLM's per-prompt image limit."""
        return self.max_turns + 1


PRESETS: dict[str, SkyRLPreset] = {
    "qwen3vl-8b": SkyRLPreset(),  # every GPU of the node: the default (billed whole)
    "qwen3vl-8b-6gpu": SkyRLPreset(gpus_per_node=6),  # the seed's layout: 6 of a 48xlarge's 8
    # The whole cluster path in minutes before the 8B run: one node, a 2B model, 3 steps,
    # an eval of 8 mazes before training and at the end, one checkpoint and export.
    "qwen3vl-2b-smoke": SkyRLPreset(
        model_path="Qwen/Qwen3-VL-2B-Instruct",
        model_params_b=2.1,
        # every GPU of the node, the 8B presets' default layout, rehearsed
        prompts_per_node=12,
        mini_batches=1,
        steps=3,
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
    "skyrl-tiny-cpu": SkyRLPreset(
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
    eval_set = keyed.get(set_key, base.eval_set)
    if eval_set != base.eval_set and turns_key not in keyed:
        keyed[turns_key] = env_for_set(str(eval_set)).max_turns  # the set's own budget
    return apply_settings(base, keyed)
