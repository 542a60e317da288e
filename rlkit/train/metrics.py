"""The local trainer's metrics logger: the run's logger (`rlkit.run.metrics`: metrics.jsonl and
Ray gauges, shared with SkyRL's bridge) plus TensorBoard event files under RUN/tensorboard, which
need torch and so live in the trainer's layer, not in the run package the notebooks import.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlkit.run.metrics import RunLogger
from rlkit.run.rundir import RunDir

_log = logging.getLogger(__name__)


def tensorboard_writer(path: Path, resume_step: int | None) -> Any:
    """A SummaryWriter at `path`, events after `resume_step` purged (a resumed run restarts
    there, as metrics.jsonl does); None when `torch.utils.tensorboard` does not import."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        _log.info("TensorBoard off (%s): metrics go to metrics.jsonl only", e)
        return None
    purge = resume_step + 1 if resume_step is not None else None
    return SummaryWriter(log_dir=str(path), purge_step=purge, flush_secs=10)


class MetricsLogger(RunLogger):
    """The run's logger with TensorBoard: `tensorboard` writes event files when
    `torch.utils.tensorboard` imports; `resume_step` is the checkpoint step a resumed run
    restarts from; `ray_gauges` as `RunLogger`'s (None: detect Ray)."""

    def __init__(
        self,
        run: RunDir,
        *,
        tensorboard: bool = True,
        ray_gauges: bool | None = None,
        resume_step: int | None = None,
    ):
        writer = tensorboard_writer(run.path / "tensorboard", resume_step) if tensorboard else None
        super().__init__(run, scalars=writer, ray_gauges=ray_gauges)
