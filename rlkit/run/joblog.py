"""What a Ray job says: its log's last lines, the JSON answer a job-as-function prints on a tagged
line (`answer`), its output followed live; `job` is any `JobHandle`-like handle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from rlkit.errors import RlkitError


def log_tail(logs: str, n: int = 3) -> str:
    """The last `n` lines of a job's log on one line ("no output" when it printed nothing)."""
    return "; ".join(logs.strip().splitlines()[-n:]) or "no output"


def read_answer(logs: str, tag: str, what: str) -> Any:
    """The JSON after `tag` on the log's last line starting with it; RlkitError `what: <the log's
    last lines>` when there is none."""
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
