"""Follow a run's job and resubmit it when it fails: the interactive way to heal a run.

    rlkit jobs watch RUN --resubmit 3 --address http://127.0.0.1:8265

A Ray job runs once: when a node dies mid-run, HyperPod replaces the node, but nothing submits
the job again. `watch` follows the newest job of RUN; when it FAILS and restarts remain, it
submits the same run again (same entrypoint, env vars, metadata and resources, rlkit's working
dir uploaded afresh as `launch` does), and the run resumes from its last complete checkpoint on
shared storage. A STOPPED job is a person's decision and is not resubmitted. For runs that
must heal with no client attached, use a KubeRay RayJob (`rlkit submit --rayjob FILE`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ray.job_submission import JobStatus

from rlkit.cluster.jobs import TERMINAL, JobHandle
from rlkit.errors import RlkitError

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster


def _same_submission(cluster: Cluster, job: JobHandle) -> dict[str, Any]:
    """What `cluster.submit` needs to submit `job`'s run again."""
    info = cluster.job_details(job.submission_id)
    meta = {k: v for k, v in (info.metadata or {}).items() if k != "rlkit_run_name"}
    return {
        "entrypoint": info.entrypoint,
        "runtime_env_vars": dict((info.runtime_env or {}).get("env_vars") or {}),
        "metadata": meta,
        "num_cpus": info.entrypoint_num_cpus or None,
        "num_gpus": info.entrypoint_num_gpus or None,
    }


def watch(
    cluster: Cluster,
    run_name: str,
    *,
    resubmit: int = 0,
    poll_s: float = 10.0,
    timeout_s: float | None = None,
    say: Callable[[str], None] = print,
) -> JobHandle:
    """Follow `run_name` until its job ends and no restart is left; returns the last job.

    Raises RlkitError when the run still failed after `resubmit` restarts (or the deadline).
    """
    if resubmit < 0:
        raise RlkitError(f"--resubmit ({resubmit}) must be >= 0 restarts")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    job = cluster.reattach(run_name)
    restarts = 0
    while True:
        status = job.status()
        if status not in TERMINAL:
            if deadline is not None and time.monotonic() > deadline:
                raise RlkitError(f"{job.submission_id} still {status.value} at the deadline")
            time.sleep(poll_s)
            continue
        if status != JobStatus.FAILED:
            say(f"{job.submission_id} {status.value}")
            return job
        if restarts == resubmit:
            tail = "; ".join(job.logs().strip().splitlines()[-3:])
            raise RlkitError(
                f"{job.submission_id} FAILED after {restarts} restart(s): {tail or 'no output'}"
            )
        restarts += 1
        again = cluster.submit(run_name, **_same_submission(cluster, job))
        say(
            f"restart {restarts}/{resubmit}: {job.submission_id} FAILED; resubmitted as "
            f"{again.submission_id} (it resumes from the run's last complete checkpoint)"
        )
        job = again
