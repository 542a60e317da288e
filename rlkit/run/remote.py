"""A run read where its files are, for a kernel that cannot see them: `read_run` submits this module
as a small Ray job whose one tagged JSON line comes back as a `SummaryRun`."""

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


def summary_line(path: str, captured: int = 1) -> str:
    return TAG + json.dumps(open_here(path).summary(captured), allow_nan=False)


READ_TIMEOUT_S = 180.0


def read_run(
    cluster: Any, path: str | Path, *, captured: int = 1, timeout_s: float = READ_TIMEOUT_S
) -> SummaryRun:
    """The run at `path` read by a Ray job on `cluster` (`rlkit.cluster.client.Cluster`), with its
    newest `captured` captured training steps (~20 KB each)."""
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
