"""A Ray job of an rlkit run: its submission id (`rlkit-<run>-<n>`), its record in a listing, and a
handle on it (status, logs, tail, stop, wait). Why numbered ids: docs/decisions.md#jobs-and-the-working-dir."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ray.job_submission import JobDetails, JobStatus

from rlkit.cluster.jobs_api import JobsApi, call
from rlkit.errors import RlkitError, UsageError

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
_PREFIX = "rlkit-"


def run_slug(run_name: str) -> str:
    """The run name as it appears in a submission id (letters, digits, '-', '_', '.')."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name.strip()).strip("-")
    if not slug:
        raise UsageError(f"run name {run_name!r} has no usable characters; use e.g. maze-8b-a")
    return slug


def _run_index(run_name: str, submission_id: str) -> int | None:
    m = re.fullmatch(re.escape(_PREFIX + run_slug(run_name)) + r"-(\d+)", submission_id)
    return int(m.group(1)) if m else None


def next_submission_id(run_name: str, existing_ids: list[str]) -> str:
    """`rlkit-<run>-<n>` with n one above the highest already used for this run."""
    used = [i for s in existing_ids if (i := _run_index(run_name, s)) is not None]
    return f"{_PREFIX}{run_slug(run_name)}-{max(used, default=0) + 1}"


@dataclass(frozen=True)
class JobRecord:
    """One line of `rlkit jobs list`."""

    submission_id: str
    status: str
    run_name: str | None
    entrypoint: str
    start_time: int | None
    """Milliseconds since the epoch, as Ray reports it."""
    end_time: int | None
    message: str | None

    def __str__(self) -> str:
        when = time.localtime(self.start_time / 1000) if self.start_time else None
        started = time.strftime("%Y-%m-%d %H:%M", when) if when else "-"
        return f"{self.submission_id:<32} {self.status:<10} {started:<16} {self.entrypoint[:60]}"


def to_record(d: JobDetails) -> JobRecord:
    meta = d.metadata or {}
    return JobRecord(
        submission_id=d.submission_id or "",
        status=str(d.status.value if hasattr(d.status, "value") else d.status),
        run_name=meta.get("rlkit_run_name"),
        entrypoint=d.entrypoint,
        start_time=d.start_time,
        end_time=d.end_time,
        message=d.message,
    )


def format_jobs(records: list[JobRecord], address: str) -> str:
    """One line per job, or a line saying there are none yet (never an empty output)."""
    if not records:
        return f"no jobs yet on {address} (notebook 03 or `rlkit train --address` submits one)"
    return "\n".join(str(r) for r in records)


def records_for_run(run_name: str, records: list[JobRecord]) -> list[JobRecord]:
    """This run's jobs, oldest (lowest n) first."""
    mine = [(i, r) for r in records if (i := _run_index(run_name, r.submission_id)) is not None]
    return [r for _, r in sorted(mine, key=lambda t: t[0])]


@dataclass(repr=False, eq=False)
class JobHandle:
    """One submitted job: status, logs, live tail, stop, wait."""

    cluster: JobsApi
    """The connection the job was found on."""
    submission_id: str
    run_name: str | None = field(default=None, kw_only=True)

    def __repr__(self) -> str:
        return f"JobHandle({self.submission_id!r} on {self.cluster.address})"

    def _ask(self, what: str, method: str):
        ask = getattr(self.cluster.client, method)
        return call(self.cluster, f"{what} {self.submission_id}", lambda: ask(self.submission_id))

    def status(self) -> JobStatus:
        return self._ask("status of", "get_job_status")

    def logs(self) -> str:
        """Everything the job printed so far."""
        return self._ask("logs of", "get_job_logs")

    def stop(self) -> bool:
        """Ask Ray to stop the job (SIGTERM, then SIGKILL); False if it had already ended."""
        return self._ask("stopping", "stop_job")

    def wait(self, timeout_s: float, *, poll_s: float = 1.0) -> JobStatus:
        """Block until the job ends; RlkitError if it is still running after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if status in TERMINAL:
                return status
            if time.monotonic() > deadline:
                raise RlkitError(
                    f"job {self.submission_id} still {status.value} after {timeout_s:.0f} s; "
                    f"watch it with `rlkit jobs logs {self.submission_id}`"
                )
            time.sleep(poll_s)

    async def tail(
        self, *, idle_s: float = 30.0, retry_s: float = 2.0, max_retries: int = 30
    ) -> AsyncIterator[str]:
        """Yield the job's output as it appears, until the job ends; a dropped stream is reopened
        (skipping what was yielded), one idle for `idle_s` is checked against the job's status."""
        sent = 0
        failures = 0
        while True:
            seen = 0
            stream = self.cluster.client.tail_job_logs(self.submission_id)
            try:
                while True:
                    chunk = await asyncio.wait_for(stream.__anext__(), timeout=idle_s)
                    failures = 0
                    start = max(0, sent - seen)
                    seen += len(chunk)
                    if start < len(chunk):
                        sent += len(chunk) - start
                        yield chunk[start:]
            except StopAsyncIteration:
                if await asyncio.to_thread(self.status) in TERMINAL:
                    return
            except TimeoutError:
                if await asyncio.to_thread(self.status) in TERMINAL:
                    # The stream went quiet rather than closing: fetch whatever it withheld.
                    rest = (await asyncio.to_thread(self.logs))[sent:]
                    if rest:
                        yield rest
                    return
            except Exception as e:  # noqa: BLE001 - Ray raises RuntimeError, aiohttp its own
                failures += 1
                if failures > max_retries:
                    raise RlkitError(
                        f"lost the log stream of {self.submission_id} {failures} times "
                        f"({e}); check {self.cluster.address} is reachable"
                    ) from e
            finally:
                await stream.aclose()
            await asyncio.sleep(retry_s)
