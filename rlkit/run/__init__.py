"""A run, whichever backend wrote it: its directory and writers, SkyRL's files as rlkit types,
and the one opener every reader uses: `open_run(path)` gives the same `Run` for a local run, a
SkyRL run and a run read through the cluster (docs/reading-runs.md).

    run = open_run("runs/demo/local-tiny")       # or a SkyRL run dir, or its export dir"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import UsageError
from rlkit.run import remote
from rlkit.run.backends import Run, RunNotFound, open_here
from rlkit.run.checkpoints import Checkpoint
from rlkit.run.skyrl_layout import find_skyrl_run

__all__ = ["Checkpoint", "Run", "RunNotFound", "is_run", "open_run", "run_or_none"]


def open_run(source: str | Path | Run, cluster: Any = None) -> Run:
    """The run at `source` (a `Run` comes back as it is); a path not visible here is read
    through `cluster` when given (`remote.read_run`), else RunNotFound."""
    if isinstance(source, Run):
        return source
    if cluster is not None and not Path(source).expanduser().exists():
        return remote.read_run(cluster, Path(source).expanduser())
    return open_here(source)


def run_or_none(source: str | Path | Run) -> Run | None:
    """`open_run(source)`, or None while nothing is at the path (a job not yet started)."""
    try:
        return open_run(source)
    except RunNotFound:
        return None


def is_run(path: str | Path) -> bool:
    """Whether `path` is a local run dir (run.json) or what `find_skyrl_run` takes for SkyRL's."""
    p = Path(path)
    return p.is_dir() and ((p / "run.json").is_file() or find_skyrl_run(p) is not None)


def run_eval(path: str | Path, step: int | None = None, protocol: str = "rlkit") -> EvalResult:
    """A SkyRL run's eval of `step` (None: its last), for `rlkit eval --dumps`; `protocol="seed"`
    refuses one that did not follow the seed's protocol."""
    if find_skyrl_run(path) is None:
        raise UsageError(f"{path} is not a SkyRL run dir or its export dir (dumped_evals/)")
    evals = open_run(path).evals()
    if not evals:
        raise UsageError(f"{path} has no eval dumps yet: its first eval writes them")
    step = max(evals) if step is None else step
    if step not in evals:
        raise UsageError(f"{path} has no eval at step {step}: evaluated {sorted(evals)}")
    result = evals[step]
    if protocol == "seed" and result.protocol != "seed":
        raise UsageError(
            f"step {step}'s eval is not the seed's protocol ({result.mode}, {result.n_mazes} "
            f"mazes x {result.samples}): run with --set eval_protocol=seed (or both)"
        )
    return result
