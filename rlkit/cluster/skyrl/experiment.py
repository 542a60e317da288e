"""SkyRL's experiment (`RlkitExp`) with rlkit's tracker, generator, trainer and chat template, and
its trainer (`RlkitTrainer`): the export a kill left out, pruning once, curriculum order, the
sampled eval, GiGPO's step level: docs/skyrl-integration.md#the-experiment-experimentpy."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence

import ray
import torch
from skyrl.backends.skyrl_train.utils.io import io
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.evaluate import evaluate
from skyrl.train.generators.base import GeneratorInterface
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils import Timer
from skyrl.train.utils.tracking import Tracking
from skyrl.train.utils.trainer_utils import cleanup_old_checkpoints
from torchdata.stateful_dataloader import StatefulDataLoader

from rlkit.cluster.skyrl.bridge import MetricsBridge
from rlkit.cluster.skyrl.generator import build_generator
from rlkit.cluster.skyrl.window import STATES_KEY
from rlkit.errors import UsageError
from rlkit.model.load import processor_template
from rlkit.recipe import Recipe
from rlkit.run.skyrl_layout import SAMPLED_EVALS
from rlkit.settings import CaptureConfig
from rlkit.train.grpo import step_credit

_log = logging.getLogger(__name__)


class BridgedTracking(Tracking):
    """SkyRL's `Tracking`, each logged step also handed to rlkit's `MetricsBridge`."""

    def __init__(self, *args, bridge: MetricsBridge, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.bridge = bridge

    def log(self, data, step, commit=False):
        super().log(data, step, commit=commit)
        self.bridge.log(data, step)

    def finish(self):
        super().finish()
        self.bridge.close()


def bridged_tracker(cfg) -> BridgedTracking:
    """SkyRL's tracker for `cfg`, bridged to rlkit's run dir (`trainer.ckpt_path`)."""
    t = cfg.trainer
    bridge = MetricsBridge(
        t.ckpt_path,
        t.export_path,
        mlflow=None if t.logger != "mlflow" else False,  # SkyRL's own MLflow run already has it
        run_name=t.run_name,
        reevaluates=t.eval_before_train,  # SkyRL evaluates a resumed step again
        groups_per_step=t.train_batch_size,  # prompts a step: the zero-variance share's base
        greedy=cfg.generator.eval_sampling_params.temperature == 0,
    )
    return BridgedTracking(
        project_name=t.project_name,
        experiment_name=t.run_name,
        backend=t.logger,
        config=cfg,
        tags=t.tags,
        bridge=bridge,
    )


def step_terms(
    uids: Sequence[str],
    is_last_step: Sequence[bool],
    row_rewards: torch.Tensor,
    states: Sequence[Sequence[int]],
    recipe: Recipe,
) -> torch.Tensor:
    """(R,) float32: each row's (an episode's turn, in order) step-level advantage. `uids`: each
    row's group; `row_rewards` (R,): the episode's reward on its last row; `states` (R, 2)."""
    ends = [i for i, last in enumerate(is_last_step) if last]
    lengths = torch.tensor([b - a for a, b in zip([-1, *ends[:-1]], ends, strict=True)])
    codes = {u: i for i, u in enumerate(dict.fromkeys(uids))}
    groups = torch.tensor([codes[uids[i]] for i in ends])
    rewards = row_rewards[ends].double()
    zeros = torch.zeros(len(ends), dtype=torch.float64)
    return step_credit(zeros, rewards, groups, lengths, torch.tensor(list(states)), recipe)


def export_due(step: int, hf_save_interval: int, steps_per_epoch: int, last_step: int) -> bool:
    """Whether SkyRL's `train` exports at `step` (every `hf_save_interval`, epoch end, last)."""
    if hf_save_interval <= 0 or step <= 0:
        return False
    return step % hf_save_interval == 0 or step % steps_per_epoch == 0 or step == last_step


def sampled_eval_cfg(cfg, samples: int, temperature: float):
    """A copy of `cfg` whose eval samples `samples` a maze at `temperature`, dumped in sampled/."""
    out = copy.deepcopy(cfg)
    out.generator.eval_n_samples_per_prompt = samples
    out.generator.eval_sampling_params.temperature = temperature
    out.trainer.export_path = os.path.join(cfg.trainer.export_path, SAMPLED_EVALS)
    return out


def driver_node() -> str:
    """The Ray node id of this process (SkyRL's trainer task)."""
    return ray.get_runtime_context().get_node_id()


class RlkitTrainer(RayPPOTrainer):
    """SkyRL's trainer with rlkit's additions, each an override of the SkyRL method it extends."""

    def __init__(
        self,
        *args,
        rows_in_order: bool = False,
        sampled_eval: tuple[int, float] | None = None,
        gigpo: Recipe | None = None,
        **kwargs,
    ) -> None:
        self.rows_in_order = rows_in_order  # read by the dataloader hook SkyRL's init calls
        self.sampled_eval = sampled_eval  # (samples a maze, temperature) after SkyRL's own eval
        self.gigpo = gigpo  # a gigpo recipe: each row's step level added to SkyRL's advantage
        super().__init__(*args, **kwargs)

    def convert_to_training_input(self, generator_output, uids):
        """SkyRL's training batch, with each row's square for GiGPO's anchor groups."""
        batch = super().convert_to_training_input(generator_output, uids)
        if self.gigpo is not None:
            batch.metadata[STATES_KEY] = list(generator_output[STATES_KEY])
        return batch

    def compute_advantages_and_returns(self, data):
        """SkyRL's advantages; under `gigpo` each row's answer tokens also get its step level."""
        data = super().compute_advantages_and_returns(data)
        if self.gigpo is None:
            return data
        states = data.metadata[STATES_KEY]
        n = len(states)  # the rows before SkyRL's padding
        meta = data.metadata
        rewards = data["rewards"][:n].sum(-1)
        step = step_terms(meta["uids"][:n], meta["is_last_step"][:n], rewards, states, self.gigpo)
        adv = data["advantages"]
        adv[:n] += step.to(adv.dtype)[:, None] * data["response_mask"][:n].to(adv.dtype)
        # the bridge logs it as loss/gigpo_step_abs_mean
        self.all_metrics["policy/gigpo_step_abs_mean"] = float(step.abs().mean())
        return data

    async def eval(self, vllm_metrics_scraper=None) -> dict[str, float]:
        """SkyRL's eval; with `sampled_eval` the sampled one after it, as `eval/sampled/...`."""
        metrics = await super().eval(vllm_metrics_scraper)
        if self.sampled_eval is None:
            return metrics
        sampled = await evaluate(
            eval_dataloader=self.eval_dataloader,
            generator=self.generator,
            cfg=sampled_eval_cfg(self.cfg, *self.sampled_eval),
            global_step=self.global_step,
            tokenizer=self.tokenizer,
            vllm_metrics_scraper=vllm_metrics_scraper,
        )
        renamed = {  # the sampled eval's names beside the seed eval's, none overwritten
            k.replace("eval/", "eval/sampled/", 1)
            if k.startswith("eval/")
            else k.replace("eval_", "eval_sampled_", 1): v
            for k, v in sampled.items()
            if "/" in k
        }
        return metrics | renamed

    def _build_train_dataloader_and_compute_training_steps(self) -> None:
        """SkyRL's training dataloader, reading the rows in order when `rows_in_order`."""
        super()._build_train_dataloader_and_compute_training_steps()
        loader = self.train_dataloader
        if self.rows_in_order and loader is not None:
            self.train_dataloader = StatefulDataLoader(
                loader.dataset,
                batch_size=loader.batch_size,
                shuffle=False,
                collate_fn=loader.collate_fn,
                num_workers=loader.num_workers,
                persistent_workers=loader.persistent_workers,
                drop_last=loader.drop_last,
                multiprocessing_context=loader.multiprocessing_context,
            )

    def load_checkpoints(self) -> tuple[int, str | None]:
        """SkyRL's load, then the loaded step's HF export if it is due and missing."""
        step, path = super().load_checkpoints()
        if path is not None and self.export_missing(step):
            _log.info("global_step_%d has a checkpoint but no HF export: writing it", step)
            self.global_step = step  # save_models names the export by it; train() sets it next
            with Timer("save_hf_model", self.all_timings):
                self.save_models()
        return step, path

    def export_missing(self, step: int) -> bool:
        """Whether `step` should have an HF export (policy, and critic if any) that is absent."""
        t = self.cfg.trainer
        steps_per_epoch = len(self.train_dataloader)
        if not export_due(step, t.hf_save_interval, steps_per_epoch, self.total_training_steps):
            return False
        roles = ("policy", "critic") if self.has_critic else ("policy",)
        step_dir = os.path.join(t.export_path, f"global_step_{step}")
        return not all(io.exists(os.path.join(step_dir, role)) for role in roles)

    def _cleanup_old_checkpoints(self) -> None:
        """SkyRL's keep-k pruning, on this node alone when every worker runs here."""
        if not self._node_ids:
            self._node_ids = self.dispatch.get_node_ids()
        if set(self._node_ids) == {driver_node()}:
            cleanup_old_checkpoints(self.cfg.trainer.ckpt_path, self.cfg.trainer.max_ckpts_to_keep)
        else:
            super()._cleanup_old_checkpoints()


class RlkitExp(BasePPOExp):
    capture: CaptureConfig = CaptureConfig()
    """Captured training rollouts (the entry passes the preset's; this default is theirs)."""

    rows_in_order: bool = False
    """Train the rows in their file's order (a curriculum), not in SkyRL's shuffled one."""

    sampled_eval: tuple[int, float] | None = None
    """(samples a maze, temperature) of a sampled eval after SkyRL's own (`eval_protocol=both`)."""

    history: int | None = None
    """The preset's history window (None: the whole conversation)."""

    gigpo: Recipe | None = None
    """The recipe when its estimator is `gigpo` (the trainer adds each row's step level)."""

    def __init__(
        self,
        cfg,
        capture: CaptureConfig | None = None,
        *,
        rows_in_order: bool = False,
        sampled_eval: tuple[int, float] | None = None,
        history: int | None = None,
        gigpo: Recipe | None = None,
    ) -> None:
        if capture is not None:
            self.capture = capture
        self.rows_in_order = rows_in_order
        self.sampled_eval = sampled_eval
        self.history = history
        self.gigpo = gigpo
        super().__init__(cfg)

    def get_tracker(self) -> Tracking:
        return bridged_tracker(self.cfg)

    def get_train_dataset(self) -> PromptDataset:
        ds = self._prompts(self.cfg.data.train_data)
        if len(ds) < self.cfg.trainer.train_batch_size:  # SkyRL's own check, in one line
            raise UsageError(
                f"{len(ds)} training rows, fewer than one batch "
                f"({self.cfg.trainer.train_batch_size}): the entry writes steps x prompts per "
                "step rows, so raise the preset's steps"
            )
        return ds

    def get_eval_dataset(self) -> PromptDataset | None:
        if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
            return self._prompts(self.cfg.data.val_data)
        return None

    def _prompts(self, files) -> PromptDataset:
        """SkyRL's datasets filtered by the dataloader's workers, with the processor's template."""
        if not getattr(self, "_processor_template_set", False):  # once: it loads the processor
            self.tokenizer.chat_template = processor_template(self.cfg.trainer.policy.model.path)
            self._processor_template_set = True
        return PromptDataset(
            datasets=files,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=max(1, self.cfg.data.dataloader.num_workers),
        )

    def get_generator(self, cfg, tokenizer, inference_engine_client) -> GeneratorInterface:
        if not cfg.generator.vision_language_generator:
            return super().get_generator(cfg, tokenizer, inference_engine_client)
        return build_generator(cfg, tokenizer, inference_engine_client, self.capture, self.history)

    def get_trainer(self, **skyrl_args) -> RayPPOTrainer:
        """`RlkitTrainer` on the arguments SkyRL passes by name (cfg, tracker, datasets, ...)."""
        return RlkitTrainer(
            **skyrl_args,
            rows_in_order=self.rows_in_order,
            sampled_eval=self.sampled_eval,
            gigpo=self.gigpo,
        )
