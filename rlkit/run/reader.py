"""One run, whichever backend wrote it: `open_run(path)` gives the same `Run` for a local run,
a SkyRL run and a run read through the cluster, so every reader reads them alike.

    run = open_run("runs/demo/local-tiny")       # or a SkyRL run dir, or its export dir
    run.config(), run.metrics(), run.evals()     # recorded config; metrics.jsonl; {step: EvalResult}
    run.trajectories(step), run.checkpoints()    # an eval's episodes; Checkpoint(step, path, ...)
    run = open_run("/fsx/rlkit/runs/RUN", cluster)   # not visible here: read by a small Ray job
The `Run` classes are in `rlkit.run.backends`; what each backend's files are: docs/reading-runs.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import UsageError
from rlkit.run import remote
from rlkit.run.backends import LocalRun, Run, RunNotFound, SkyRLRunReader, open_here
from rlkit.run.skyrl_layout import find_skyrl_run

__all__ = ["LocalRun", "Run", "RunNotFound", "SkyRLRunReader", "is_run", "open_run", "run_or_none"]


def open_run(source: str | Path | Run, cluster: Any = None) -> Run:
    """The run at `source` (a local run dir, a SkyRL run dir or export dir; a `Run` comes back
    as it is). A path this kernel cannot see is read through `cluster` when one is given
    (`rlkit.run.remote.read_run`), else RunNotFound in one line; a file is a UsageError."""
    if isinstance(source, Run):
        return source
    if cluster is not None and not Path(source).expanduser().exists():
        return remote.read_run(cluster, Path(source).expanduser())
    return open_here(source)


def run_or_none(source: str | Path | Run) -> Run | None:
    """`open_run(source)`, or None while nothing is at the path (a job just submitted has not
    written its run dir yet): how a reader that polls a run opens it."""
    try:
        return open_run(source)
    except RunNotFound:
        return None


def is_run(path: str | Path) -> bool:
    """Whether `path` is a run of either backend: a local run dir (run.json, written before the
    first step) or what `find_skyrl_run` takes for SkyRL's (run dir or export dir)."""
    p = Path(path)
    return p.is_dir() and ((p / "run.json").is_file() or find_skyrl_run(p) is not None)


def run_eval(path: str | Path, step: int | None = None, protocol: str = "rlkit") -> EvalResult:
    """A SkyRL run's own eval of `step` (None: its last) as `rlkit eval --dumps` prints it, read
    with the run's recorded sampling; `protocol="seed"` refuses one that did not follow it."""
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
