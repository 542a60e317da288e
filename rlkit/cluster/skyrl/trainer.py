"""SkyRL's trainer, which writes the HF export a killed job left out of its resumed step.

SkyRL 0.4.0's `RayPPOTrainer.train` saves a step's checkpoint (`save_checkpoints`:
`<ckpt_path>/global_step_N/`, then the latest marker) and then its HF export (`save_models`:
`<export_path>/global_step_N/policy`, made atomic by a staging dir). A job killed between the
two resumes from global_step_N, and nothing writes that export again: SkyRL exports only after
training a step. rlkit's readers (`list_checkpoints`, `rlkit eval --policy`) then never see the
step's model, though its weights are in the checkpoint. `RlkitTrainer.load_checkpoints` writes
the export right after loading, when SkyRL would have exported at that step (`export_due`).

`RlkitExp.get_trainer` (rlkit.cluster.skyrl.experiment) builds it; tests/skyrl/test_export_gap.py
runs SkyRL's own save and load code on it with stand-in workers.
"""

from __future__ import annotations

import logging
import os

from skyrl.backends.skyrl_train.utils.io import io
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils import Timer

_log = logging.getLogger(__name__)


def export_due(step: int, hf_save_interval: int, steps_per_epoch: int, last_step: int) -> bool:
    """Whether SkyRL's `train` exports at `step` (trainer.py:457-460, 590-593): every
    `hf_save_interval` steps, at every epoch end and at the run's last step; never if the
    interval is <= 0."""
    if hf_save_interval <= 0 or step <= 0:
        return False
    return step % hf_save_interval == 0 or step % steps_per_epoch == 0 or step == last_step


class RlkitTrainer(RayPPOTrainer):
    def load_checkpoints(self) -> tuple[int, str | None]:
        """SkyRL's load, then the loaded step's HF export if it is due and missing.

        At the run's last step SkyRL's own end-of-run save writes the export a second time
        (replaced atomically; only a job killed in its final save gets there)."""
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
