"""A run, whichever backend wrote it: the run directory and its writers (`rundir`,
`checkpoints`, `metrics`, `captures`), SkyRL's files read as rlkit types (`skyrl_layout`,
`skyrl_dumps`), the `Run` of each backend (`backends`) and the one opener every reader uses
(`reader.open_run`, through the cluster with `remote` and `joblog` when the files are
elsewhere)."""

from rlkit.run.checkpoints import Checkpoint
from rlkit.run.reader import Run, RunNotFound, is_run, open_run, run_or_none

__all__ = ["Checkpoint", "Run", "RunNotFound", "is_run", "open_run", "run_or_none"]
