"""Follow a run's job and resubmit it when it fails or stalls: `rlkit jobs watch RUN --resubmit 3`.
How progress is judged: docs/decisions.md#healing-a-run-watch-hang-rules-rayjob."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ray.job_submission import JobStatus

from rlkit.cluster.hang import STEP_PREFIX
from rlkit.cluster.jobs import TERMINAL, JobHandle
from rlkit.errors import RlkitError
from rlkit.run.remote import log_tail

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster


def resubmit_job(cluster: Cluster, job: JobHandle, run_name: str | None = None) -> JobHandle:
    """Submit `job`'s run again, as it was submitted; the new job resumes from the run dir."""
    info = cluster.job_details(job.submission_id)
    meta = dict(info.metadata or {})
    name = run_name or job.run_name or meta.get("rlkit_run_name")
    if not name:
        raise RlkitError(f"{job.submission_id} was not submitted by rlkit: no run to resubmit")
    cpus, gpus = meta.get("rlkit_num_cpus"), meta.get("rlkit_num_gpus")
    return cluster.submit(
        name,
        info.entrypoint,
        runtime_env_vars=dict((info.runtime_env or {}).get("env_vars") or {}),
        metadata={k: v for k, v in meta.items() if not k.startswith("rlkit_")},
        num_cpus=float(cpus) if cpus is not None else None,
        num_gpus=float(gpus) if gpus is not None else None,
    )


def restart_line(restarts: int, limit: int, old: JobHandle, new: JobHandle, how: str) -> str:
    return (
        f"restart {restarts}/{limit}: {old.submission_id} {how}; resubmitted as "
        f"{new.submission_id} (it resumes from the run's last complete checkpoint)"
    )


def progress(logs: str) -> tuple[int, int]:
    """How far a job's log shows it: (step lines, characters); a step line outranks output."""
    steps = sum(1 for line in logs.splitlines() if line.startswith(STEP_PREFIX))
    return (steps, 0 if steps else len(logs))


class StallClock:
    """Whether a running job has made no `progress` for `seconds` (None: never)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self.reset()

    def reset(self) -> None:
        self.seen, self.since = (-1, -1), self.clock()

    def stalled(self, job: JobHandle) -> bool:
        if self.seconds is None:
            return False
        now = progress(job.logs())
        if now != self.seen:
            self.seen, self.since = now, self.clock()
        return self.clock() - self.since > self.seconds

    def what(self) -> str:
        """What stopped: no step line (a zombie) or no output at all."""
        return "printed no step line" if self.seen[0] > 0 else "wrote no output"


def watch(
    cluster: Cluster,
    run_name: str,
    *,
    resubmit: int = 0,
    poll_s: float = 10.0,
    timeout_s: float | None = None,
    stall_s: float | None = None,
    say: Callable[[str], None] = print,
) -> JobHandle:
    """Follow `run_name` until its job ends and no restart is left; returns the last job, or
    RlkitError when it still failed after `resubmit` restarts (or at the deadline)."""
    if resubmit < 0:
        raise RlkitError(f"--resubmit ({resubmit}) must be >= 0 restarts")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    job, restarts, clock = cluster.reattach(run_name), 0, StallClock(stall_s)
    while True:
        status = job.status()
        stalled = status == JobStatus.RUNNING and clock.stalled(job)
        if stalled:
            say(f"{job.submission_id} {clock.what()} for {stall_s:.0f} s: stopping it")
            job.stop()
            job.wait(300)
        elif status not in TERMINAL:
            if deadline is not None and time.monotonic() > deadline:
                raise RlkitError(f"{job.submission_id} still {status.value} at the deadline")
            time.sleep(poll_s)
            continue
        elif status != JobStatus.FAILED:
            say(f"{job.submission_id} {status.value}")
            return job
        how = "stalled" if stalled else "FAILED"
        if restarts == resubmit:
            raise RlkitError(
                f"{job.submission_id} {how} after {restarts} restart(s): {log_tail(job.logs())}"
            )
        restarts += 1
        again = resubmit_job(cluster, job, run_name)
        clock.reset()
        say(restart_line(restarts, resubmit, job, again, how))
        job = again
