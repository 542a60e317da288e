"""A SkyRL preset as what a Ray job runs: SkyRL's `key=value` overrides, the run's paths on shared
storage, and the shell command (`build_overrides(get_preset("qwen3vl-8b-6gpu"), "run-1")`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rlkit.cluster.skyrl.preset_checks import generate_length
from rlkit.cluster.skyrl.presets import TINY_WARM, SkyRLPreset
from rlkit.env.maze_env import ENV_ID
from rlkit.model.config import VISION_LINEARS

ENTRY_MODULE = "rlkit.cluster.skyrl.entry"
MM_CACHE_KWARG = "mm_processor_cache_gb"
"""vLLM's multimodal cache per engine in GiB (SkyRL sets 0)."""


@dataclass(frozen=True)
class RunPaths:
    """Where one SkyRL run keeps its files on shared storage."""

    run_dir: str
    data_dir: str
    export_dir: str
    log_dir: str

    @classmethod
    def for_run(cls, preset: SkyRLPreset, run_name: str) -> RunPaths:
        root = PurePosixPath(preset.storage.runs_root)
        if not root.is_absolute():  # the client's directory: the job's working dir is a copy
            root = PurePosixPath(Path(root).resolve())
        return cls.at(str(root / run_name))

    @classmethod
    def at(cls, run_dir: str) -> RunPaths:
        """The paths of the run whose dir (SkyRL's `trainer.ckpt_path`) is `run_dir`."""
        root = PurePosixPath(run_dir)
        return cls(str(root), str(root / "data"), str(root / "exports"), str(root / "logs"))

    @property
    def init_model_dir(self) -> str:
        """Where the entry builds a `rlkit:tiny-warm` model."""
        return str(PurePosixPath(self.run_dir) / "init_model")


def build_overrides(preset: SkyRLPreset, run_name: str, answer: int | None = None) -> list[str]:
    """SkyRL `key=value` overrides for one run of `preset`; `answer`: tokens per answer (None:
    `generate_length`)."""
    p, paths = preset, RunPaths.for_run(preset, run_name)
    train_batch = p.prompts_per_step
    engines = p.num_gpus // p.layout.tensor_parallel_size
    answer = generate_length(p) if answer is None else answer
    e = p.eval  # SkyRL's own eval: the seed's protocol unless `sampled` (`both` adds it after)
    sampled = e.eval_protocol == "sampled"
    eval_samples, eval_temp = (e.eval_samples, e.eval_temperature) if sampled else (1, 0.0)
    model = paths.init_model_dir if p.model.model_path == TINY_WARM else p.model.model_path
    return [
        # data: rows from rlkit.env.data (env_class rlkit-maze, maze spec in extra_info)
        f"data.train_data=['{paths.data_dir}/train.parquet']",
        f"data.val_data=['{paths.data_dir}/eval.parquet']",
        f"environment.env_class={ENV_ID}",
        # algorithm: every switch of the recipe (rlkit.recipe), no critic
        *p.recipe.skyrl_overrides(),
        f"trainer.policy.optimizer_config.lr={p.batch.lr}",
        f"trainer.policy.optimizer_config.scheduler={p.batch.lr_schedule}",
        # placement: vLLM engines colocated with the FSDP2 policy on every GPU
        f"trainer.policy.model.path={model}",
        f"trainer.ref.model.path={model}",  # the KL anchor: the start model
        "trainer.strategy=fsdp",
        "trainer.placement.colocate_all=true",
        f"trainer.placement.policy_num_nodes={p.layout.nodes}",
        f"trainer.placement.policy_num_gpus_per_node={p.node_gpus}",
        f"trainer.placement.ref_num_nodes={p.layout.nodes}",
        f"trainer.placement.ref_num_gpus_per_node={p.node_gpus}",
        "trainer.ref.fsdp_config.cpu_offload=false",
        f"generator.inference_engine.num_engines={engines}",
        f"generator.inference_engine.tensor_parallel_size={p.layout.tensor_parallel_size}",
        f"generator.inference_engine.gpu_memory_utilization={p.layout.gpu_memory_utilization}",
        *engine_kwargs(p),
        # batches
        f"trainer.epochs={p.batch.epochs}",  # one epoch of steps x prompts rows: no per-epoch saves
        f"trainer.train_batch_size={train_batch}",
        f"trainer.policy_mini_batch_size={train_batch // p.batch.mini_batches}",
        f"trainer.micro_forward_batch_size_per_gpu={p.batch.micro_batch_per_gpu}",
        f"trainer.micro_train_batch_size_per_gpu={p.batch.micro_batch_per_gpu}",
        "trainer.update_epochs_per_batch=1",
        f"trainer.max_prompt_length={p.task.max_prompt_length}",
        # multi-turn VLM generation (SkyRL requires all four together)
        "generator.vision_language_generator=true",
        "generator.batched=false",
        "generator.use_conversation_multi_turn=true",
        "trainer.remove_microbatch_padding=false",
        f"generator.max_turns={p.turn_limit}",  # each row's own budget below it (eval_sets)
        # a history window: one row a turn, each scored on the prompt its engine saw
        f"generator.step_wise_trajectories={str(p.task.history is not None).lower()}",
        f"generator.max_input_length={p.task.max_input_length}",
        f"generator.n_samples_per_prompt={p.batch.group_size}",
        f"generator.sampling_params.max_generate_length={answer}",
        f"generator.sampling_params.temperature={p.batch.temperature}",
        f"generator.sampling_params.top_p={p.batch.top_p}",
        f"generator.eval_n_samples_per_prompt={eval_samples}",
        f"generator.eval_sampling_params.temperature={eval_temp}",
        f"generator.eval_sampling_params.max_generate_length={answer}",
        # evals, checkpoints, resume: resubmitting the run continues from its latest checkpoint
        f"trainer.eval_interval={p.eval.eval_interval}",
        "trainer.eval_before_train=true",
        "trainer.dump_eval_results=true",
        f"trainer.ckpt_interval={p.storage.ckpt_interval}",
        f"trainer.hf_save_interval={p.storage.ckpt_interval}",
        f"trainer.max_ckpts_to_keep={p.storage.max_ckpts_to_keep}",
        "trainer.resume_mode=latest",
        f"trainer.ckpt_path={paths.run_dir}",
        f"trainer.export_path={paths.export_dir}",
        f"trainer.log_path={paths.log_dir}",
        f"trainer.logger={p.storage.logger}",
        "trainer.project_name=rlkit",
        f"trainer.run_name={run_name}",
        *device_overrides(p),
        *model_overrides(p),
    ]


def model_overrides(p: SkyRLPreset) -> list[str]:
    """SkyRL's LoRA settings for the preset's `Tuning` (none with LoRA off)."""
    t = p.model
    if t.lora_rank == 0:
        return []
    key = "trainer.policy.model.lora"
    targets = t.target_modules
    listed = targets if isinstance(targets, str) else f"[{','.join(targets)}]"
    out = [
        f"{key}.rank={t.lora_rank}",
        f"{key}.alpha={t.lora_alpha}",
        f"{key}.target_modules={listed}",
    ]
    if t.frozen_pattern is not None:
        out.append(f"{key}.exclude_modules={t.frozen_pattern}")
    vision = targets == "all-linear" or bool(set(targets) & set(VISION_LINEARS))
    if vision and t.freeze_vision != "tower+merger":
        out.append("generator.inference_engine.engine_init_kwargs.enable_tower_connector_lora=true")
    return out


def entrypoint_command(
    preset: SkyRLPreset, run_name: str, preset_name: str | None = None, answer: int | None = None
) -> str:
    """The shell command the Ray job runs: the preset as JSON, then SkyRL's overrides."""
    ours = ["--preset", preset_name] if preset_name else []
    ours += ["--config", preset.to_json()]
    overrides = build_overrides(preset, run_name, answer)
    return shlex.join(["python", "-m", ENTRY_MODULE, *ours, "--", *overrides])


def device_overrides(p: SkyRLPreset) -> list[str]:
    """Dataloader workers, KV cache, and on a CPU host no flash attention, fp32, eager vLLM."""
    out = []
    if p.layout.dataloader_workers is not None:
        out.append(f"data.dataloader.num_workers={p.layout.dataloader_workers}")
    if p.layout.kv_cache_gb is not None:
        key = "generator.inference_engine.engine_init_kwargs.kv_cache_memory_bytes"
        out.append(f"{key}={int(p.layout.kv_cache_gb * 2**30)}")
    if p.layout.device != "cpu":
        return out
    return [
        *out,
        "trainer.flash_attn=false",
        "trainer.enable_ray_gpu_monitor=false",  # it scrapes Prometheus in the generator's loop
        "generator.inference_engine.model_dtype=float32",
        "generator.inference_engine.enforce_eager=true",
        *(
            f"trainer.{role}.fsdp_config.mixed_precision.{k}=fp32"
            for role in ("policy", "ref")
            for k in ("param_dtype", "reduce_dtype", "buffer_dtype")
        ),
    ]


def engine_kwargs(p: SkyRLPreset) -> list[str]:
    """vLLM engine arguments, through SkyRL's `engine_init_kwargs`; why each:
    docs/skyrl-integration.md#presets-and-their-overrides-presetspy-overridespy."""
    key = "generator.inference_engine.engine_init_kwargs"
    out = [
        f"{key}.max_model_len={p.task.max_model_len}",
        f"{key}.limit_mm_per_prompt.image={p.images_per_episode}",
        f"{key}.mm_device_do_normalize=false",  # the trainer reads the CPU-normalised pixels
    ]
    if p.layout.mm_cache_gb > 0:
        out.append(f"{key}.{MM_CACHE_KWARG}={p.layout.mm_cache_gb}")
    if p.layout.attention_backend:
        out.append(f"{key}.attention_backend={p.layout.attention_backend}")
    return out
