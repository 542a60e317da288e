"""SkyRL's trainer with rlkit's additions (`RlkitTrainer`): the export a kill left out, pruning once,
curriculum order, the sampled eval, GiGPO's step level: docs/skyrl-integration.md#the-trainer-trainerpy-gigpopy."""

from __future__ import annotations

import copy
import logging
import os

import ray
from skyrl.backends.skyrl_train.utils.io import io
from skyrl.train.evaluate import evaluate
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils import Timer
from skyrl.train.utils.trainer_utils import cleanup_old_checkpoints
from torchdata.stateful_dataloader import StatefulDataLoader

from rlkit.cluster.skyrl.gigpo import STATES_KEY, step_terms
from rlkit.recipe import Recipe
from rlkit.run.skyrl_layout import SAMPLED_EVALS

_log = logging.getLogger(__name__)


def export_due(step: int, hf_save_interval: int, steps_per_epoch: int, last_step: int) -> bool:
    """Whether SkyRL's `train` exports at `step` (trainer.py:457-460, 590-593): every
    `hf_save_interval` (> 0) steps, at every epoch end and at the run's last step."""
    if hf_save_interval <= 0 or step <= 0:
        return False
    return step % hf_save_interval == 0 or step % steps_per_epoch == 0 or step == last_step


def in_order(loader: StatefulDataLoader) -> StatefulDataLoader:
    """`loader` rebuilt to read its dataset in order (SkyRL's shuffles), as a curriculum's rows
    are written; its saved state (SkyRL's data.pt) resumes it at the row it reached."""
    return StatefulDataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        shuffle=False,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        persistent_workers=loader.persistent_workers,
        drop_last=loader.drop_last,
        multiprocessing_context=loader.multiprocessing_context,
    )


def sampled_eval_cfg(cfg, samples: int, temperature: float):
    """A copy of SkyRL's `cfg` whose eval is the sampled one: `samples` a maze at
    `temperature`, dumped under `<export_path>/sampled/dumped_evals/`."""
    out = copy.deepcopy(cfg)
    out.generator.eval_n_samples_per_prompt = samples
    out.generator.eval_sampling_params.temperature = temperature
    out.trainer.export_path = os.path.join(cfg.trainer.export_path, SAMPLED_EVALS)
    return out


def driver_node() -> str:
    """The Ray node id of this process (SkyRL's trainer task)."""
    return ray.get_runtime_context().get_node_id()


class RlkitTrainer(RayPPOTrainer):
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
        """SkyRL's training batch, carrying each row's square for GiGPO's anchor groups."""
        batch = super().convert_to_training_input(generator_output, uids)
        if self.gigpo is not None:
            batch.metadata[STATES_KEY] = list(generator_output[STATES_KEY])
        return batch

    def compute_advantages_and_returns(self, data):
        """SkyRL's advantages (step-wise: each row its episode's); under `gigpo` each row's
        answer tokens also get its step level (`rlkit.cluster.skyrl.gigpo.step_terms`)."""
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
        self.all_metrics["policy/gigpo_step_abs_mean"] = float(
            step.abs().mean()
        )  # rlkit: loss/gigpo_step_abs_mean
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
        if self.rows_in_order and self.train_dataloader is not None:
            self.train_dataloader = in_order(self.train_dataloader)

    def load_checkpoints(self) -> tuple[int, str | None]:
        """SkyRL's load, then the loaded step's HF export if it is due and missing (at the last
        step SkyRL's end-of-run save writes it again, replaced atomically)."""
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
        """SkyRL's keep-k pruning: on this node alone when every worker runs here, else SkyRL's
        own (this node, then a Ray task on each worker node)."""
        if not self._node_ids:
            self._node_ids = self.dispatch.get_node_ids()
        if set(self._node_ids) == {driver_node()}:
            cleanup_old_checkpoints(self.cfg.trainer.ckpt_path, self.cfg.trainer.max_ckpts_to_keep)
        else:
            super()._cleanup_old_checkpoints()
