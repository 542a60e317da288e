"""Reading a run through the cluster, when this kernel cannot see its files (Studio without
/fsx mounted): a small Ray job on the cluster opens the run where its files are and returns its
summary (`rlkit.run.remote`), read back as a `SummaryRun` with the same interface as any run.

    run = read_run(cluster, "/fsx/rlkit/runs/RUN")     # one short CPU job, ~seconds
    run.captures(run.capture_steps()[-1])               # the newest captured step came along
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rlkit.cluster.client import Cluster
from rlkit.errors import RlkitError, UsageError
from rlkit.run.reader import SummaryRun
from rlkit.run.remote import summary_from_logs

READ_TIMEOUT_S = 180.0
"""A reading job opens a few files; minutes mean a busy or unreachable cluster."""


def read_run(
    cluster: Cluster, path: str | Path, *, captured: int = 1, timeout_s: float = READ_TIMEOUT_S
) -> SummaryRun:
    """The run at `path` on the cluster's storage, read by a Ray job there (0.1 CPU), with the
    episodes of its newest `captured` captured training steps (~20 KB each)."""
    if captured < 0:
        raise UsageError(f"captured ({captured}) must be >= 0 captured steps to bring")
    name = Path(path).name or "run"
    argv = ["python", "-m", "rlkit.run.remote", str(path), "--captured", str(captured)]
    entrypoint = shlex.join(argv)
    handle = cluster.submit(f"read-{name}", entrypoint, num_cpus=0.1)
    status = handle.wait(timeout_s)
    logs = handle.logs()
    if str(getattr(status, "value", status)).upper() != "SUCCEEDED":
        tail = " | ".join(logs.strip().splitlines()[-3:]) or "no output"
        raise RlkitError(
            f"reading {path} on the cluster: job {handle.submission_id} {status}: {tail}"
        )
    return summary_from_logs(logs, str(path))
