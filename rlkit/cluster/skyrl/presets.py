"""SkyRL on a GPU cluster: presets -> SkyRL config overrides, and the command a Ray job runs.

rlkit does not re-implement SkyRL's trainer. A preset is turned into SkyRL's own
`key=value` overrides (parsed by `SkyRLTrainConfig.from_cli_overrides` inside the job), and
the job runs `python -m rlkit.cluster.skyrl.entry <overrides...>`, which registers the maze env and
starts SkyRL's experiment. `rlkit.cluster.skyrl.readers` turns what SkyRL writes (checkpoints, eval
dumps) into rlkit's types, so plots and replays work the same for cluster runs.

    rlkit submit --preset qwen3vl-8b-6gpu --address http://127.0.0.1:8265 --dry-run

Run directory on shared storage (`/fsx/rlkit/runs/<run>` by default), the same top-level
layout as a local run: SkyRL's `ckpt_path` *is* the run dir, so `global_step_N/` and
`latest_ckpt_global_step.txt` land where rlkit's readers and plots look; `data/` holds the
parquet rows, `exports/` the HF exports and `exports/dumped_evals/`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from rlkit.env.maze_env import ENV_ID, env_for_set
from rlkit.errors import UsageError

ENTRY_MODULE = "rlkit.cluster.skyrl.entry"


@dataclass(frozen=True)
class SkyRLPreset:
    """A SkyRL GRPO recipe for the maze env. Start: SkyRL's `examples/train/visgym` recipe.

    Departures from that recipe are stated on the field they touch.
    """

    model_path: str = "Qwen/Qwen3-VL-8B-Instruct"
    """HF id or a path on /fsx (pre-download to /fsx to spare every node the download)."""
    gpus_per_node: int = 6
    """RTX PRO 6000 nodes on HyperPod have 6 GPUs (the recipe assumed 8)."""
    nodes: int = 1
    """Policy and vLLM engines span this many nodes; batch sizes scale with it."""
    tensor_parallel_size: int = 1
    """8B in bf16 fits one 96 GB GPU with its KV cache: one vLLM engine per GPU."""
    group_size: int = 8
    """GRPO group: episodes sampled per maze; advantages compare within a group."""
    eval_set: str = "test-large"
    """Pinned maze set for the eval split (training rows come from its family, disjoint seeds).
    Departure: 6x6-cell mazes instead of VisGym's; the rows carry the set's env config (full
    view, 32 px cells, full prompt), so the 8B sees the same task `rlkit eval --set` plays."""
    max_turns: int = env_for_set("test-large").max_turns
    """Turn budget. Departure: the eval set's own budget (not the recipe's 18), so a cluster
    eval and `rlkit eval` on the same checkpoint measure the same thing."""
    prompts_per_node: int = 36
    """Mazes per step per node. Departure from 32: with 6 GPUs the mini batch must split
    evenly over GPUs (SkyRL asserts it); 36 prompts x 8 = 288 episodes per node and step."""
    mini_batches: int = 3
    """Optimizer steps per training batch (policy_mini_batch_size = prompts / this)."""
    micro_batch_per_gpu: int = 4
    """Sequences per forward/backward on one GPU; multi-turn VLM prompts are long."""
    lr: float = 1.0e-6
    """The recipe's rate: full fine-tuning of an 8B model drifts at higher rates."""
    kl_coef: float = 0.005
    """KL loss to the reference policy (the recipe's value); keeps answers well-formed."""
    loss_reduction: str = "token_mean"
    """Departure from the recipe's `token_mean_legacy`, which averages per-micro-batch token
    means with equal weight, so the objective changed with `micro_batch_per_gpu` and GPU count.
    `token_mean` (SkyRL's default, DAPO's) averages over every model token of the mini batch:
    the local trainer's reduction, and the same value whether a row is a turn or an episode
    (tests/skyrl/test_objective.py)."""
    temperature: float = 1.0
    """Rollout sampling temperature; GRPO needs diverse groups."""
    epochs: int = 20
    """Passes over the training rows."""
    train_rows: int = 256
    """Training mazes written by `rlkit.env.data.write_datasets` (the recipe's 256)."""
    eval_interval: int = 10
    """Steps between evals on the 64-maze eval split (dumped for rlkit's readers)."""
    eval_samples: int = 4
    """Samples per eval maze. Departure from 1: 64 single samples give a +-12 point CI."""
    ckpt_interval: int = 10
    """Steps between resumable checkpoints (and HF exports at the same steps)."""
    max_ckpts_to_keep: int = 3
    """Full FSDP checkpoints of an 8B model are large; keep the last few."""
    max_model_len: int = 60000
    """vLLM context: images accumulate over turns."""
    max_input_length: int = 8192
    """Conversation tokens after which an episode is cut (stop_reason 'length')."""
    max_generate_length: int = 1024
    """Tokens per answer."""
    max_prompt_length: int = 2048
    gpu_memory_utilization: float = 0.8
    """vLLM's share of each GPU; the rest holds the sleeping FSDP policy."""
    vllm_attention_backend: str | None = None
    """VLLM_ATTENTION_BACKEND for the job; RTX PRO 6000 (sm_120) may need e.g. TRITON_ATTN."""
    logger: str = "console"
    """SkyRL tracker: console, wandb (forward WANDB_API_KEY), tensorboard, mlflow."""
    runs_root: str = "/fsx/rlkit/runs"
    """Shared storage visible to every node; the run dir is `<runs_root>/<run name>`."""

    def __post_init__(self) -> None:
        env_for_set(self.eval_set)  # an unknown set fails here, not on the cluster
        for name in ("gpus_per_node", "nodes", "group_size", "mini_batches", "epochs"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} ({getattr(self, name)}) must be >= 1")
        if self.group_size < 2:
            raise UsageError(f"group_size ({self.group_size}) must be >= 2: GRPO compares a group")
        if self.gpus_per_node % self.tensor_parallel_size:
            raise UsageError(
                f"gpus_per_node ({self.gpus_per_node}) must be a multiple of "
                f"tensor_parallel_size ({self.tensor_parallel_size}): colocate_all needs "
                "policy GPUs == engines x TP"
            )
        if self.prompts_per_node % self.mini_batches:
            raise UsageError(
                f"prompts_per_node ({self.prompts_per_node}) must divide into "
                f"mini_batches ({self.mini_batches})"
            )
        per_gpu = self.prompts_per_node // self.mini_batches * self.group_size
        if (
            per_gpu % self.gpus_per_node
            or (per_gpu // self.gpus_per_node) % self.micro_batch_per_gpu
        ):
            raise UsageError(
                f"a mini batch of {per_gpu} episodes per node must split into "
                f"{self.gpus_per_node} GPUs x micro batches of {self.micro_batch_per_gpu}; "
                "change prompts_per_node or micro_batch_per_gpu"
            )

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


PRESETS: dict[str, SkyRLPreset] = {"qwen3vl-8b-6gpu": SkyRLPreset()}


def get_preset(name: str, **changes: object) -> SkyRLPreset:
    if name not in PRESETS:
        raise UsageError(f"unknown SkyRL preset {name!r}; choose from {', '.join(PRESETS)}")
    return replace(PRESETS[name], **changes) if changes else PRESETS[name]


@dataclass(frozen=True)
class RunPaths:
    """Where one SkyRL run keeps its files on shared storage."""

    run_dir: str
    data_dir: str
    export_dir: str
    log_dir: str

    @classmethod
    def for_run(cls, preset: SkyRLPreset, run_name: str) -> RunPaths:
        root = PurePosixPath(preset.runs_root) / run_name
        return cls(str(root), str(root / "data"), str(root / "exports"), str(root / "logs"))


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def build_overrides(preset: SkyRLPreset, run_name: str) -> list[str]:
    """SkyRL `key=value` overrides for one run of `preset` (SkyRL's config key names)."""
    p, paths = preset, RunPaths.for_run(preset, run_name)
    train_batch = p.prompts_per_node * p.nodes
    engines = p.num_gpus // p.tensor_parallel_size
    return [
        # data: rows from rlkit.env.data (env_class rlkit-maze, maze spec in extra_info)
        f"data.train_data=['{paths.data_dir}/train.parquet']",
        f"data.val_data=['{paths.data_dir}/eval.parquet']",
        f"environment.env_class={ENV_ID}",
        # algorithm: GRPO, no critic; KL as a loss term; the local trainer's loss reduction
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=true",
        f"trainer.algorithm.kl_loss_coef={p.kl_coef}",
        f"trainer.algorithm.loss_reduction={p.loss_reduction}",
        f"trainer.policy.optimizer_config.lr={p.lr}",
        # placement: vLLM engines colocated with the FSDP2 policy on every GPU
        f"trainer.policy.model.path={p.model_path}",
        "trainer.strategy=fsdp",
        "trainer.placement.colocate_all=true",
        f"trainer.placement.policy_num_nodes={p.nodes}",
        f"trainer.placement.policy_num_gpus_per_node={p.gpus_per_node}",
        f"trainer.placement.ref_num_nodes={p.nodes}",
        f"trainer.placement.ref_num_gpus_per_node={p.gpus_per_node}",
        "trainer.ref.fsdp_config.cpu_offload=false",
        f"generator.inference_engine.num_engines={engines}",
        f"generator.inference_engine.tensor_parallel_size={p.tensor_parallel_size}",
        f"generator.inference_engine.gpu_memory_utilization={p.gpu_memory_utilization}",
        f"generator.inference_engine.engine_init_kwargs.max_model_len={p.max_model_len}",
        # batches
        f"trainer.epochs={p.epochs}",
        f"trainer.train_batch_size={train_batch}",
        f"trainer.policy_mini_batch_size={train_batch // p.mini_batches}",
        f"trainer.micro_forward_batch_size_per_gpu={p.micro_batch_per_gpu}",
        f"trainer.micro_train_batch_size_per_gpu={p.micro_batch_per_gpu}",
        "trainer.update_epochs_per_batch=1",
        f"trainer.max_prompt_length={p.max_prompt_length}",
        # multi-turn VLM generation (SkyRL requires all four together)
        "generator.vision_language_generator=true",
        "generator.batched=false",
        "generator.use_conversation_multi_turn=true",
        "trainer.remove_microbatch_padding=false",
        f"generator.max_turns={p.max_turns}",
        f"generator.max_input_length={p.max_input_length}",
        f"generator.n_samples_per_prompt={p.group_size}",
        f"generator.sampling_params.max_generate_length={p.max_generate_length}",
        f"generator.sampling_params.temperature={p.temperature}",
        f"generator.eval_n_samples_per_prompt={p.eval_samples}",
        # evals, checkpoints, resume: resubmitting the run continues from its latest checkpoint
        f"trainer.eval_interval={p.eval_interval}",
        "trainer.eval_before_train=true",
        "trainer.dump_eval_results=true",
        f"trainer.ckpt_interval={p.ckpt_interval}",
        f"trainer.hf_save_interval={p.ckpt_interval}",
        f"trainer.max_ckpts_to_keep={p.max_ckpts_to_keep}",
        "trainer.resume_mode=latest",
        f"trainer.ckpt_path={paths.run_dir}",
        f"trainer.export_path={paths.export_dir}",
        f"trainer.log_path={paths.log_dir}",
        f"trainer.logger={p.logger}",
        "trainer.project_name=rlkit",
        f"trainer.run_name={run_name}",
    ]


def entrypoint_command(preset: SkyRLPreset, run_name: str) -> str:
    """The shell command the Ray job runs: datasets on shared storage, then SkyRL."""
    paths = RunPaths.for_run(preset, run_name)
    ours = [
        "--data-dir",
        paths.data_dir,
        "--train-rows",
        str(preset.train_rows),
        "--eval-set",
        preset.eval_set,
    ]
    return shlex.join(
        ["python", "-m", ENTRY_MODULE, *ours, "--", *build_overrides(preset, run_name)]
    )


def job_env_vars(preset: SkyRLPreset, passthrough: dict[str, str] | None = None) -> dict[str, str]:
    """Env vars for the job: the attention backend, plus tokens the caller forwards."""
    env = dict(passthrough or {})
    if preset.vllm_attention_backend:
        env["VLLM_ATTENTION_BACKEND"] = preset.vllm_attention_backend
    return env
