"""Ray jobs for rlkit runs: submission ids, the shipped working dir, and a handle to watch one.

A run name maps to submission ids `rlkit-<run>-<n>`: resubmitting the same run (to resume it
after a node replacement) gets the next n instead of colliding with the dead job's id, and
`reattach` picks the highest n. The job's working dir is the project checkout as Ray packs
it (.gitignore honoured); its size is checked here first so that a stray dataset fails in one
clear line instead of inside Ray's upload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.job_submission import JobDetails, JobStatus

from rlkit.errors import RlkitError, UsageError

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster

DEFAULT_REQUEST_TIMEOUT_S = 10.0
MAX_WORKING_DIR_BYTES = 100 * 2**20
"""Ray refuses working dirs above 100 MiB; rlkit compares the unpacked size, a safe bound."""
WORKING_DIR_EXCLUDES = [".git", ".venv", "runs", "**/__pycache__", "*.egg-info"]
"""Never shipped, even if .gitignore misses them: history, environments, run outputs."""
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
        started = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(self.start_time / 1000))
            if self.start_time
            else "-"
        )
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


def project_root() -> Path:
    """The directory holding the `rlkit` package: what a job needs to import it."""
    return Path(__file__).resolve().parents[2]  # rlkit/cluster/jobs.py -> the checkout


def _shipped_files(root: Path) -> list[Path]:
    """Files Ray would pack: git's view of .gitignore when root is a checkout, else a walk."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
        files = [root / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = [p for p in root.rglob("*") if p.is_file()]
    skip = {".git", ".venv", "runs", "__pycache__"}
    return [
        f
        for f in files
        if f.is_file()
        and not skip.intersection(f.relative_to(root).parts)
        and not any(part.endswith(".egg-info") for part in f.relative_to(root).parts)
    ]


def working_dir_runtime_env(root: Path, *, limit: int = MAX_WORKING_DIR_BYTES) -> dict[str, Any]:
    """A runtime_env shipping `root`; refuses one too big for Ray before anything uploads."""
    root = root.resolve()
    if not root.is_dir():
        raise UsageError(f"working dir {root} does not exist; pass the project checkout")
    files = _shipped_files(root)
    total = sum(f.stat().st_size for f in files)
    if total > limit:
        biggest = sorted(files, key=lambda f: f.stat().st_size, reverse=True)[:3]
        names = ", ".join(
            f"{f.relative_to(root)} ({f.stat().st_size / 2**20:.1f} MiB)" for f in biggest
        )
        raise RlkitError(
            f"working dir {root} is {total / 2**20:.0f} MiB, over Ray's {limit / 2**20:.0f} MiB "
            f"limit; largest: {names}; add them to .gitignore or .rayignore"
        )
    return {"working_dir": str(root), "excludes": list(WORKING_DIR_EXCLUDES)}


PACKAGING_LOGGERS = {
    "ray.dashboard.modules.dashboard_sdk": logging.WARNING,  # "Uploading package gcs://..."
    "ray._private.runtime_env.packaging": logging.WARNING,  # each .gitignore, per pass
    # "Directory '.git' is now ignored by default": rlkit never ships .git (WORKING_DIR_EXCLUDES)
    "ray._private.runtime_env.working_dir": logging.ERROR,
}


@contextlib.contextmanager
def quiet_packaging() -> Iterator[None]:
    """Ray's per-file packaging chatter off while a working dir uploads (warnings stay).

    `describe_submission` already says what ships; Ray would add a dozen INFO lines per
    submission (every .gitignore it honours, three times) to a notebook's output.
    """
    saved = {name: logging.getLogger(name).level for name in PACKAGING_LOGGERS}
    for name, level in PACKAGING_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def mask_env(env_vars: dict[str, str]) -> dict[str, str]:
    """Env var names with their values hidden: they often hold tokens (WANDB_API_KEY, HF_TOKEN)."""
    return {k: "***" for k in env_vars}


_URL_CREDENTIALS = re.compile(r"(\w+://)[^/\s@]+@")


def mask_url_credentials(text: str) -> str:
    """`https://user:token@host/...` -> `https://***@host/...`: private index URLs in pip
    options carry tokens as often as env vars do."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def describe_submission(
    submission_id: str, entrypoint: str, runtime_env: dict[str, Any], metadata: dict[str, str]
) -> str:
    """What is (or would be) submitted, printable: env var values masked."""
    lines = [f"submission id: {submission_id}", f"entrypoint:    {entrypoint}"]
    lines.append(f"working_dir:   {runtime_env.get('working_dir')}")
    if runtime_env.get("env_vars"):
        masked = mask_env(runtime_env["env_vars"])
        lines.append("env_vars:      " + " ".join(f"{k}={v}" for k, v in masked.items()))
    if runtime_env.get("pip"):
        lines.append("pip:           " + mask_url_credentials(" ".join(runtime_env["pip"])))
    lines.append("metadata:      " + " ".join(f"{k}={v}" for k, v in metadata.items()))
    return "\n".join(lines)


class JobHandle:
    """One submitted job: status, logs, live tail, stop, wait."""

    def __init__(self, cluster: Cluster, submission_id: str, *, run_name: str | None = None):
        self.cluster = cluster
        self.submission_id = submission_id
        self.run_name = run_name

    def __repr__(self) -> str:
        return f"JobHandle({self.submission_id!r} on {self.cluster.address})"

    def status(self) -> JobStatus:
        return self.cluster._call(
            f"status of {self.submission_id}",
            lambda: self.cluster.client.get_job_status(self.submission_id),
        )

    def logs(self) -> str:
        """Everything the job printed so far."""
        return self.cluster._call(
            f"logs of {self.submission_id}",
            lambda: self.cluster.client.get_job_logs(self.submission_id),
        )

    def stop(self) -> bool:
        """Ask Ray to stop the job (SIGTERM, then SIGKILL); False if it had already ended."""
        return self.cluster._call(
            f"stopping {self.submission_id}",
            lambda: self.cluster.client.stop_job(self.submission_id),
        )

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
        """Yield the job's output as it appears, until the job ends.

        Ray's log stream restarts from the first byte on each connection, so after a dropped
        or silent connection this reconnects and skips what was already yielded. A stream idle
        for `idle_s` is checked against the job's status rather than trusted.
        """
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
