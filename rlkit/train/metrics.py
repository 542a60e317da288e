"""The local trainer's metrics logger: the run's logger (`rlkit.run.metrics`: metrics.jsonl and
Ray gauges, shared with SkyRL's bridge) plus TensorBoard event files under RUN/tensorboard, which
need torch and so live in the trainer's layer, not in the run package the notebooks import.
"""

from __future__ import annotations

import logging

from rlkit.run.metrics import RunLogger
from rlkit.run.rundir import RunDir

_log = logging.getLogger(__name__)


class MetricsLogger(RunLogger):
    """The run's logger (`rlkit.run.metrics.RunLogger`) plus TensorBoard event files under
    RUN/tensorboard when `tensorboard` and `torch.utils.tensorboard` imports; events after
    `resume_step` (a resumed run's checkpoint step) are purged."""

    def __init__(
        self,
        run: RunDir,
        *,
        tensorboard: bool = True,
        ray_gauges: bool | None = None,
        resume_step: int | None = None,
    ):
        writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                _log.info("TensorBoard off (%s): metrics go to metrics.jsonl only", e)
            else:
                purge = resume_step + 1 if resume_step is not None else None
                path = str(run.path / "tensorboard")
                writer = SummaryWriter(log_dir=path, purge_step=purge, flush_secs=10)
        super().__init__(run, scalars=writer, ray_gauges=ray_gauges)
