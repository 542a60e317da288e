"""A run read where its files are, for a kernel that cannot see them (Studio without /fsx):
`read_run` submits this module as a small Ray job, which prints the run's `summary()` as one
tagged JSON line, read back as a `SummaryRun`.

    run = open_run("/fsx/rlkit/runs/RUN", cluster)     # not visible here: one job, ~seconds
    run = read_run(cluster, "/fsx/rlkit/runs/RUN")      # read there even if visible here
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from rlkit.errors import RlkitError, UsageError
from rlkit.run.backends import SummaryRun, open_here
from rlkit.run.joblog import answer

TAG = "rlkit-run-summary "
"""Starts the one log line that holds the summary; anything else the job prints is ignored."""


def summary_line(path: str, captured: int = 1) -> str:
    """The tagged JSON line for the run at `path`, with its newest `captured` captured steps."""
    return TAG + json.dumps(open_here(path).summary(captured), allow_nan=False)


READ_TIMEOUT_S = 180.0
"""A reading job opens a few files; minutes mean a busy or unreachable cluster."""


def read_run(
    cluster: Any, path: str | Path, *, captured: int = 1, timeout_s: float = READ_TIMEOUT_S
) -> SummaryRun:
    """The run at `path` on the cluster's storage, read by a Ray job there, with the episodes
    of its newest `captured` captured training steps (~20 KB each). `cluster`: an
    `rlkit.cluster.client.Cluster` (its `submit` returns a job handle)."""
    if captured < 0:
        raise UsageError(f"captured ({captured}) must be >= 0 captured steps to bring")
    name = Path(path).name or "run"
    argv = ["python", "-m", "rlkit.run.remote", str(path), "--captured", str(captured)]
    handle = cluster.submit(f"read-{name}", shlex.join(argv), num_cpus=0.1)
    what = f"the cluster could not read {path}"
    return SummaryRun(answer(handle, TAG, what, timeout_s=timeout_s))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlkit.run.remote", description=__doc__)
    parser.add_argument("run_dir")
    parser.add_argument(
        "--captured", type=int, default=1, help="newest captured training steps to include"
    )
    args = parser.parse_args(argv)
    if args.captured < 0:
        parser.error(f"--captured ({args.captured}) must be >= 0")
    try:
        print(summary_line(args.run_dir, args.captured), flush=True)
    except RlkitError as e:
        print(f"rlkit: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
