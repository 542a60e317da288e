"""A run, whichever backend wrote it: the run directory's layout and its writers (`rundir`,
`manifest`, `metrics`), SkyRL's files read as rlkit types (`skyrl_layout`, `skyrl_dumps`), and
the one reader every consumer uses (`reader.open_run`; `remote` when the files are elsewhere)."""

from rlkit.run.reader import Run, RunCheckpoint, RunNotFound, is_run, open_run

__all__ = ["Run", "RunCheckpoint", "RunNotFound", "is_run", "open_run"]
