"""What a Ray job says (its log's last lines, the tagged JSON answer of a job-as-function, its
output followed live), and `read_run`: this module as a small Ray job that reads a run where its
files are and answers a `SummaryRun`."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlkit.errors import RlkitError, UsageError
from rlkit.run.backends import SummaryRun, open_here


def log_tail(logs: str, n: int = 3) -> str:
    """The last `n` lines of a job's log on one line ("no output" when it printed nothing)."""
    return "; ".join(logs.strip().splitlines()[-n:]) or "no output"


def read_answer(logs: str, tag: str, what: str) -> Any:
    """The JSON after `tag` on the log's last line starting with it (none: RlkitError `what`)."""
    lines = [ln for ln in logs.splitlines() if ln.startswith(tag)]
    if not lines:
        raise RlkitError(f"{what}: {log_tail(logs)}")
    try:
        return json.loads(lines[-1][len(tag) :])
    except ValueError as e:
        raise RlkitError(f"{what}: its answer is not JSON ({e})") from e


def answer(
    job: Any, tag: str, what: str, *, timeout_s: float, poll_s: float = 1.0, failed_ok: bool = False
) -> Any:
    """Wait for `job` to end and return its tagged answer (`read_answer`); a job that did not
    succeed is an RlkitError naming its last lines, unless `failed_ok` (its answer says why)."""
    status = job.wait(timeout_s, poll_s=poll_s)
    status = str(getattr(status, "value", status))
    logs = job.logs()
    ended = f"{what}: job {job.submission_id} ended {status}"
    if status != "SUCCEEDED" and not failed_ok:
        raise RlkitError(f"{ended}: {log_tail(logs)}")
    return read_answer(logs, tag, ended if status != "SUCCEEDED" else what)


def follow(job: Any, write: Callable[[str], object], *, hide: str | None = None) -> None:
    """Pass the job's output to `write` as it comes, until the job ends; with `hide`, line by
    line, leaving out the lines that start with it (a tagged answer)."""

    async def loop() -> None:
        async for chunk in job.tail():
            if hide is None:
                write(chunk)
                continue
            for line in chunk.splitlines():
                if not line.startswith(hide):
                    write(line)

    asyncio.run(loop())


TAG = "rlkit-run-summary "
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
        summary = open_here(args.run_dir).summary(args.captured)
        print(TAG + json.dumps(summary, allow_nan=False), flush=True)
    except RlkitError as e:
        print(f"rlkit: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
