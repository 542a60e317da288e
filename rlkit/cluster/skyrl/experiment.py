"""SkyRL's experiment with rlkit's metrics bridge at its extension point (runs where SkyRL is).

`RlkitExp` is SkyRL's `BasePPOExp` whose `get_tracker` returns `BridgedTracking`: SkyRL's own
`Tracking` (console, wandb, mlflow, ... as `trainer.logger` says) that also hands every step's
dict to `MetricsBridge` (RUN/metrics.jsonl, Ray gauges, MLflow) for the run dir, which is
SkyRL's `trainer.ckpt_path`. Its `get_generator` gives VLM runs `RlkitVLMGenerator` (image
placeholders that always match the images: rlkit.cluster.skyrl.generator), and its `get_trainer`
gives `RlkitTrainer` (a resumed step gets the HF export a kill left out: .trainer).
"""

from __future__ import annotations

from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.generators.base import GeneratorInterface
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.tracking import Tracking

from rlkit.cluster.skyrl.bridge import MetricsBridge
from rlkit.cluster.skyrl.generator import build_generator
from rlkit.cluster.skyrl.trainer import RlkitTrainer


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
    def get_tracker(self) -> Tracking:
        return bridged_tracker(self.cfg)

    def get_generator(self, cfg, tokenizer, inference_engine_client) -> GeneratorInterface:
        if not cfg.generator.vision_language_generator:
            return super().get_generator(cfg, tokenizer, inference_engine_client)
        return build_generator(cfg, tokenizer, inference_engine_client)

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
        )
