"""The sections of a SkyRL preset (`rlkit.cluster.skyrl.presets.SkyRLPreset`), one frozen
dataclass per concern, each field saying why it has its value. Leaf names stay unique across
sections, so `--set prompts_per_node=16` needs no section (`rlkit.settings.apply_settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.cluster.skyrl.instances import DEFAULT_INSTANCE
from rlkit.env.maze_env import env_for_set
from rlkit.model.config import Tuning
from rlkit.train.config import WarmStartConfig


@dataclass(frozen=True)
class SkyModel(Tuning):
    """The policy model, where its weights come from, and which of them train (`Tuning`: the
    local trainer's `lora_rank`, `lora_alpha`, `lora_targets`, `freeze_vision`, as SkyRL's
    `trainer.policy.model.lora.*`)."""

    model_path: str = "Qwen/Qwen3-VL-8B-Instruct"
    """HF id or a path on /fsx (pre-download to /fsx to spare every node the download); or
    `rlkit:tiny-warm` (TINY_WARM), the tiny model the job builds for itself."""
    model_params_b: float = 8.8
    """Parameters in billions (Qwen3-VL-8B: 8.77 B): sizes the /fsx estimate."""
    warm_start_to: float = WarmStartConfig.stop_at
    """For `rlkit:tiny-warm`: the free sampled validation solve rate its warm start stops at
    (the local recipe's, like the 8B's 43.75% start: partial skill, so GRPO's groups differ)."""


@dataclass(frozen=True)
class SkyLayout:
    """Where the run runs: the instance, GPUs and nodes, and each engine's share of a GPU."""

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
    device: str = "cuda"
    """cuda (the cluster) or cpu: SkyRL's own trainer on a CPU host, through rlkit's device
    seam (`rlkit.cluster.skyrl.cpu_seam`), on a local head offering logical GPUs: the cluster's
    code path rehearsed on a laptop. Only sizes and `device_overrides` differ."""
    gpu_memory_utilization: float = 0.8
    """vLLM's share of each GPU; the rest holds the sleeping FSDP policy."""
    kv_cache_gb: float | None = None
    """vLLM's KV cache per engine in GiB; None sizes it by `gpu_memory_utilization` (GPUs).
    On a CPU the cache is host memory, and the utilization share would take most of it."""
    mm_cache_gb: float = 2.0
    """vLLM's multimodal cache per engine in GiB (engine host memory): an engine keeps the
    pictures it has received, so rlkit's generator sends each picture's tensors once an
    episode instead of every turn (SkyRL sets 0). 0 turns it off. An 8B step's ~36 episodes
    an engine x 19 VisGym pictures (~1.2 MB of pixels each) take ~0.8 GB; past the size an
    engine drops old pictures and a turn that needed one is sent again whole."""
    attention_backend: str | None = None
    """vLLM attention backend, e.g. TRITON_ATTN for RTX PRO 6000 (sm_120). Passed as the
    engine's `attention_backend` (vLLM 0.30 no longer reads VLLM_ATTENTION_BACKEND)."""
    driver_memory_gb: int = 64
    """Ray memory the SkyRL trainer task reserves: it holds every rollout's pixel values, so it
    must land on a GPU worker (its pod: `pod`, checked to hold it), never on the head pod
    (32 GiB, deploy/raycluster.yaml)."""
    dataloader_workers: int | None = None
    """SkyRL's dataloader worker processes (None: SkyRL's 8). On a 2-core host their start-up
    took ~55 of an eval's ~60 s, while generating took 4-9 s."""


@dataclass(frozen=True)
class SkyBatch:
    """A step's rollouts and the optimizer over them: groups, batch splits, rate, sampling, length of the run."""

    group_size: int = 8
    """GRPO group: episodes sampled per maze; advantages compare within a group."""
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


@dataclass(frozen=True)
class SkyTask:
    """What the model plays and the token lengths an episode may take."""

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
    max_model_len: int = 60000
    """vLLM context: images accumulate over turns."""
    max_input_length: int = 8192
    """Conversation tokens after which an episode is cut (stop_reason 'length')."""
    max_generate_length: int | None = 1024
    """Tokens per answer, its end of turn included. None: the canonical answer's length in the
    model's tokenizer plus room (`preset_checks.generate_length`: 4 + 4 with the tiny
    tokenizer, 8 + 4 with Qwen's). One that cannot hold the canonical answer is refused."""
    max_prompt_length: int = 2048
    answer_format: str = "visgym"
    """Squares game: `visgym` (SkyRL's `<action>up</action>`) or `visgym-sft` (VisGym's tuples,
    `('move', 0)`, what its SFT checkpoints write: `rlkit.maze.parsing`)."""
    format_weight: float = 0.0
    """Share of the reward paid for format (VisGym's SFT recipe: 0.2); 0: the verdict alone."""
    prompt_file: str | None = None
    """Squares game: a text file (on /fsx: the client and the job both read it) whose text
    replaces rlkit's rules; run.json records its path and sha256."""
    history: int | None = None
    """Turns a prompt keeps: the system message and the last `history` observations with the
    answers between them (the local trainer's `task.history`, same meaning); None: the whole
    conversation (SkyRL's loop). A window trains each turn as its own row (SkyRL's step-wise
    training), scored on exactly the prompt the engine saw."""


@dataclass(frozen=True)
class SkyEval:
    """The evals SkyRL runs on the eval split and dumps for rlkit's readers."""

    eval_protocol: str = "seed"
    """Which evals a run records (`EVAL_PROTOCOLS`). `seed`: the seed's protocol, SkyRL's own
    eval at temperature 0, one sample a maze over the whole pinned set, before training and
    every `eval_interval` steps: "N/64 = x% [exact CI]", comparable with the seed's 28/64.
    `sampled`: `eval_samples` a maze at `eval_temperature`, an interval clustered by maze.
    `both`: the seed's eval, then the sampled one on the same weights, dumped apart
    (`exports/sampled/dumped_evals/`)."""
    eval_mazes: int = 64
    """Mazes of the eval set in the eval split (the first N; 64 = the whole pinned set, which
    the seed's protocol needs)."""
    eval_interval: int = 10
    """Steps between evals on the eval split (dumped for rlkit's readers)."""
    eval_samples: int = 4
    """Samples per maze of the sampled eval (`eval_protocol` sampled or both): 64 single
    samples give a +-12 point CI, 4 narrow it (clustered by maze)."""
    eval_temperature: float = 1.0
    """Temperature of the sampled eval, as `rlkit eval` samples; the seed's eval is greedy."""
    eval_sets: str | None = None
    """Pinned sets every eval plays, comma-separated (`visgym-easy,visgym-hard`): `eval_set`
    (training's family) and others of the same game, each with its own turn budget, dumped and
    read per set (`open_run(...).evals_by_set()`). None: `eval_set` alone."""


@dataclass(frozen=True)
class SkyStorage:
    """What a run keeps on shared storage, and where its metrics go."""

    ckpt_interval: int = 10
    """Steps between resumable checkpoints (and HF exports at the same steps)."""
    max_ckpts_to_keep: int = 3
    """Full FSDP checkpoints of an 8B model are large; keep the last few."""
    fsx_budget_gb: float = 1500.0
    """The dry run refuses a run whose estimated /fsx use (kept checkpoints + every export)
    exceeds this; raise it or export less often (ckpt_interval)."""
    runs_root: str = "/fsx/rlkit/runs"
    """Shared storage visible to every node; the run dir is `<runs_root>/<run name>`."""
    logger: str = "console"
    """SkyRL tracker: console, wandb (forward WANDB_API_KEY), tensorboard, mlflow."""
