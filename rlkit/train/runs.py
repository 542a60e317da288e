"""The run directory moved to the run package both backends share: `rlkit.run.rundir`."""

from rlkit.run.manifest import checkpoint_problem
from rlkit.run.rundir import MARKER, Checkpoint, CheckpointWarning, RunDir, step_dirs

__all__ = ["MARKER", "Checkpoint", "CheckpointWarning", "RunDir", "checkpoint_problem", "step_dirs"]
