"""A run, whichever backend wrote it: its directory and writers, SkyRL's files as rlkit types,
and the one opener every reader uses (`open_run`)."""

from rlkit.run.checkpoints import Checkpoint
from rlkit.run.reader import Run, RunNotFound, is_run, open_run, run_or_none

__all__ = ["Checkpoint", "Run", "RunNotFound", "is_run", "open_run", "run_or_none"]
