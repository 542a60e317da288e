"""The sections of a SkyRL preset, one frozen dataclass per concern (leaf names unique across
them: `--set prompts_per_node=16`; why each default: docs/skyrl-integration.md), and the cluster's
hardware: HyperPod's `ml.g7e` sizes and what one worker pod may take (sources:
docs/cluster.md#the-mlg7e-table-and-its-sources)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from rlkit.cluster.stage import STAGED_MARKER
from rlkit.env.maze_env import EnvConfig, env_for_set
from rlkit.env.visgym_text import answer_view
from rlkit.errors import UsageError
from rlkit.model.config import Tuning
from rlkit.train.config import WarmStartConfig


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: int
    memory_gib: int
    efa: int
    """EFA interfaces (`vpc.amazonaws.com/efa`); 0: multi-node traffic goes over TCP."""
    gpu_memory_gib: int = 96


G7E: dict[str, InstanceType] = {
    i.name: i
    for i in (
        InstanceType("ml.g7e.2xlarge", gpus=1, vcpus=8, memory_gib=64, efa=0),
        InstanceType("ml.g7e.4xlarge", gpus=1, vcpus=16, memory_gib=128, efa=0),
        InstanceType("ml.g7e.8xlarge", gpus=1, vcpus=32, memory_gib=256, efa=1),
        InstanceType("ml.g7e.12xlarge", gpus=2, vcpus=48, memory_gib=512, efa=1),
        InstanceType("ml.g7e.24xlarge", gpus=4, vcpus=96, memory_gib=1024, efa=2),
        InstanceType("ml.g7e.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa=4),
    )
}
DEFAULT_INSTANCE = "ml.g7e.48xlarge"


def instance_type(name: str) -> InstanceType:
    if name not in G7E:
        raise UsageError(f"unknown instance type {name!r}; choose from {', '.join(G7E)}")
    return G7E[name]


SYSTEM_SHARE = 1 / 8
"""Of a node's vCPUs and memory, what the worker pod leaves to the kubelet, agents, a head pod."""
SHM_MAX_GIB = 64
"""/dev/shm for NCCL and vLLM (memory-backed: it counts against the pod's memory)."""


@dataclass(frozen=True)
class PodShape:
    """What the one Ray worker pod on a node asks Kubernetes for (requests == limits)."""

    gpus: int
    cpus: int
    memory_gib: int
    efa: int
    """All of the node's EFA interfaces when the run spans nodes, else none."""
    shm_gib: int


def pod_shape(inst: InstanceType, gpus: int, nodes: int) -> PodShape:
    """The worker pod for `gpus` of `inst`'s GPUs: vCPUs and memory in proportion less
    SYSTEM_SHARE, EFA only multi-node (mixing EFA and non-EFA pods hangs NCCL)."""
    share = gpus / inst.gpus * (1 - SYSTEM_SHARE)
    memory = math.floor(inst.memory_gib * share)
    return PodShape(
        gpus=gpus,
        cpus=math.floor(inst.vcpus * share),
        memory_gib=memory,
        efa=inst.efa if nodes > 1 else 0,
        shm_gib=min(SHM_MAX_GIB, memory // 4),
    )


TRAIN_BYTES_PER_PARAM = 16
"""FSDP2 training state per parameter: fp32 weights, fp32 gradients, Adam's two fp32 moments."""
REF_BYTES_PER_PARAM = 2
"""The reference policy (KL loss) in bf16, sharded like the policy."""
GPU_STATE_SHARE = 0.8
"""Of a GPU, what the sharded training state may fill (the rest: activations, vLLM)."""


def check_layout(
    inst: InstanceType, gpus_per_node: int, nodes: int, params_b: float, driver_memory_gb: int
) -> PodShape:
    """The worker pod of this layout, or a one-line UsageError naming what the instance lacks."""
    if gpus_per_node > inst.gpus:
        raise UsageError(
            f"{inst.name} has {inst.gpus} GPU(s), the layout asks {gpus_per_node} per node: "
            "lower gpus_per_node or choose a larger instance_type"
        )
    if nodes > 1 and not inst.efa:
        raise UsageError(
            f"{inst.name} has no EFA, so {nodes} nodes would all-reduce over TCP: use nodes=1 or "
            "ml.g7e.8xlarge or larger"
        )
    pod = pod_shape(inst, gpus_per_node, nodes)
    if driver_memory_gb > pod.memory_gib - pod.shm_gib:
        raise UsageError(
            f"SkyRL's trainer task reserves {driver_memory_gb} GiB, a {inst.name} worker pod with "
            f"{gpus_per_node} GPU(s) has {pod.memory_gib - pod.shm_gib} GiB besides /dev/shm: "
            "lower driver_memory_gb or take more of a larger instance"
        )
    need = params_b * 1e9 * (TRAIN_BYTES_PER_PARAM + REF_BYTES_PER_PARAM) / 2**30
    need /= gpus_per_node * nodes
    room = inst.gpu_memory_gib * GPU_STATE_SHARE
    if need > room:
        raise UsageError(
            f"a {params_b:g} B model's training state is ~{need:.0f} GiB per GPU over "
            f"{gpus_per_node * nodes} GPU(s), over {room:.0f} GiB of a {inst.gpu_memory_gib} GiB "
            "GPU: add nodes or GPUs per node"
        )
    return pod


@dataclass(frozen=True)
class SkyModel(Tuning):
    """The policy model, where its weights come from, and which of them train (`Tuning`)."""

    model_path: str = "Qwen/Qwen3-VL-8B-Instruct"
    """HF id, a path on /fsx, or `rlkit:tiny-warm` (the tiny model the job builds)."""
    model_params_b: float = 8.8
    """Parameters in billions: sizes the /fsx estimate."""
    warm_start_to: float = WarmStartConfig.stop_at
    """For `rlkit:tiny-warm`: the sampled validation solve rate its warm start stops at."""


@dataclass(frozen=True)
class SkyLayout:
    """Where the run runs: the instance, GPUs and nodes, and each engine's share of a GPU."""

    instance_type: str | None = DEFAULT_INSTANCE
    """HyperPod instance of the GPU workers (`G7E`); None: a CPU host."""
    gpus_per_node: int | None = None
    """GPUs the run takes on each node; None: all of the instance's (a node is billed whole)."""
    nodes: int = 1
    """Policy and vLLM engines span this many nodes; batch sizes scale with it."""
    tensor_parallel_size: int = 1
    """GPUs per vLLM engine."""
    device: str = "cuda"
    """cuda, or cpu: SkyRL's own trainer on a CPU host through the device seam (`cpu_seam`)."""
    gpu_memory_utilization: float = 0.8
    """vLLM's share of each GPU; the rest holds the sleeping FSDP policy."""
    kv_cache_gb: float | None = None
    """vLLM's KV cache per engine in GiB; None: sized by `gpu_memory_utilization`."""
    mm_cache_gb: float = 2.0
    """vLLM's multimodal cache per engine in GiB (host memory); 0: off."""
    attention_backend: str | None = None
    """vLLM attention backend, e.g. TRITON_ATTN for RTX PRO 6000 (sm_120)."""
    driver_memory_gb: int = 64
    """Ray memory (GiB) SkyRL's trainer task reserves for the rollouts' pixels."""
    dataloader_workers: int | None = None
    """SkyRL's dataloader worker processes (None: SkyRL's 8)."""


@dataclass(frozen=True)
class SkyBatch:
    """A step's rollouts and the optimizer over them."""

    group_size: int = 8
    """GRPO group: episodes sampled per maze."""
    prompts_per_node: int = 36
    """Mazes per step per node."""
    mini_batches: int = 3
    """Optimizer steps per training batch."""
    micro_batch_per_gpu: int = 4
    """Sequences per forward/backward on one GPU."""
    lr: float = 1.0e-6
    lr_schedule: str = "constant_with_warmup"
    """SkyRL's `optimizer_config.scheduler` (`LR_SCHEDULES`); `cosine` falls to 0 at the end."""
    temperature: float = 1.0
    """Rollout sampling temperature; only 1.0 unless TIS is on (`recipe.tis_ratio_type`)."""
    top_p: float = 1.0
    """Rollout nucleus sampling; only 1.0 unless TIS is on."""
    epochs: int = 1
    """Passes over the rows; only 1 (docs/skyrl-integration.md)."""
    steps: int = 140
    """GRPO steps: the run is one epoch of `steps x prompts per step` fresh rows."""


@dataclass(frozen=True)
class SkyTask:
    """What the model plays and the token lengths an episode may take."""

    eval_set: str = "visgym-easy"
    """Pinned maze set of the eval split; training rows: its family on a disjoint stream."""
    cell_px: int | None = None
    """Pixels per square of the rows' pictures; None: the eval set's own."""
    max_turns: int = env_for_set("visgym-easy").max_turns
    """Turn budget; another eval set brings its own (`get_preset`)."""
    max_model_len: int = 60000
    """vLLM context in tokens: images accumulate over turns."""
    max_input_length: int = 8192
    """Conversation tokens after which an episode is cut (stop_reason 'length')."""
    max_generate_length: int | None = 1024
    """Tokens per answer; None: derived from the tokenizer (`generate_length`)."""
    max_prompt_length: int = 2048
    answer_format: str = "visgym"
    """Squares game: `visgym` (`<action>up</action>`) or `visgym-sft` (VisGym's tuples)."""
    format_weight: float = 0.0
    """Share of the reward paid for format (VisGym's SFT recipe: 0.2)."""
    prompt_file: str | None = None
    """Squares game: a text file (on /fsx) whose text replaces rlkit's rules."""
    history: int | None = None
    """Turns a prompt keeps (a row a turn, step-wise); None: the whole conversation."""


@dataclass(frozen=True)
class SkyEval:
    """The evals SkyRL runs on the eval split and dumps for rlkit's readers."""

    eval_protocol: str = "seed"
    """`seed` (greedy, one sample a maze), `sampled` (`eval_samples` a maze) or `both`."""
    eval_mazes: int = 64
    """Mazes of the eval set evaluated (the first N; 64: the whole pinned set)."""
    eval_interval: int = 10
    """Steps between evals."""
    eval_samples: int = 4
    """Samples per maze of the sampled eval."""
    eval_temperature: float = 1.0
    """Temperature of the sampled eval."""
    eval_sets: str | None = None
    """Pinned sets every eval plays, comma-separated, of the training game; None: `eval_set`."""


@dataclass(frozen=True)
class SkyStorage:
    """What a run keeps on shared storage, and where its metrics go."""

    ckpt_interval: int = 10
    """Steps between checkpoints (and HF exports at the same steps)."""
    max_ckpts_to_keep: int = 3
    """Full FSDP checkpoints kept."""
    fsx_budget_gb: float = 1500.0
    """The most GB of /fsx a run may take (kept checkpoints + every export)."""
    runs_root: str = "/fsx/rlkit/runs"
    """Shared storage visible to every node; the run dir is `<runs_root>/<run name>`."""
    logger: str = "console"
    """SkyRL tracker: console, wandb (forward WANDB_API_KEY), tensorboard, mlflow."""


def set_view(eval_set: str, cell_px: int | None = None) -> EnvConfig:
    """The set's env config, its picture drawn at `cell_px` when given (walls scaled with it)."""
    cfg = env_for_set(eval_set)
    if cell_px is None or cell_px == cfg.style.cell_px:
        return cfg
    if not 4 <= cell_px <= 128:
        raise UsageError(f"cell_px ({cell_px}) must be 4..128 pixels a square (None: the set's)")
    wall = max(1, round(cfg.style.wall_px * cell_px / cfg.style.cell_px))
    return replace(cfg, style=replace(cfg.style, cell_px=cell_px, wall_px=wall))


def task_view(task: SkyTask) -> EnvConfig:
    """The env config a run's rows carry: the set's view with the task's answer settings."""
    cfg = set_view(task.eval_set, task.cell_px)
    return answer_view(cfg, task.answer_format, task.format_weight, task.prompt_file)


def model_state(model_path: str) -> str:
    """How the start model looks from here; a local directory that is no HF model is refused."""
    path = Path(model_path)
    if model_path.startswith("rlkit:"):
        return "rlkit's own, built by the job"
    if not model_path.startswith("/") or not path.exists():
        return "a hub id or not visible here: the job loads it"
    if not (path / "config.json").is_file():
        raise UsageError(
            f"model_path {model_path} has no config.json: give an HF model dir "
            "(rlkit model stage MODEL --to DIR writes one)"
        )
    if (path / STAGED_MARKER).is_file():
        return "staged and checked by rlkit model stage"
    return "an HF dir not staged by rlkit model stage (its files are not checked)"
