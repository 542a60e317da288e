"""SkyRL's experiment (`RlkitExp`, a `BasePPOExp`) with rlkit's tracker, generator, trainer and chat
template at its extension points: docs/skyrl-integration.md#the-experiment-experimentpy."""

from __future__ import annotations

from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.generators.base import GeneratorInterface
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.tracking import Tracking

from rlkit.cluster.skyrl.bridge import MetricsBridge
from rlkit.cluster.skyrl.generator import build_generator
from rlkit.cluster.skyrl.trainer import RlkitTrainer
from rlkit.errors import UsageError
from rlkit.model.load import processor_template
from rlkit.recipe import Recipe
from rlkit.settings import CaptureConfig


class BridgedTracking(Tracking):
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
        """SkyRL's datasets, their length filter run by as many processes as the run's
        dataloader has workers (SkyRL fixes 8); the tokenizer gets the processor's template
        here (docs/skyrl-integration.md#the-experiment-experimentpy)."""
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

    def get_trainer(
        self,
        cfg,
        tracker,
        tokenizer,
        train_dataset,
        eval_dataset,
        inference_engine_client,
        generator,
        colocate_pg,
    ) -> RayPPOTrainer:
        return RlkitTrainer(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
            rows_in_order=self.rows_in_order,
            sampled_eval=self.sampled_eval,
            gigpo=self.gigpo,
        )
