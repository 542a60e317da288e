"""Launch local-backend training as a Ray job: the same run a terminal starts, on any head.

    handle = submit_training("local-tiny", "runs/tiny")          # local head, started if needed
    handle = submit_training("smoke", "/fsx/runs/s1", address="http://127.0.0.1:8265")

The job runs `python -m rlkit.cli train ...` in the shipped working directory; the run
directory must be reachable from the head's workers (local disk for a local head, FSx on
HyperPod). Submitting the same run again resumes it from its latest checkpoint.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from rlkit.cluster import Cluster, connect
from rlkit.errors import UsageError
from rlkit.jobs import JobHandle
from rlkit.train_config import preset as load_preset

LOCAL = ("local", "auto", "")


def training_entrypoint(
    preset: str, run_dir: str | Path, *, resume: str = "latest", overrides: Sequence[str] = ()
) -> str:
    """The shell command the job runs (validated here, before anything is submitted)."""
    load_preset(preset)  # unknown presets fail now, not minutes later on the cluster
    parts = [
        "python",
        "-m",
        "rlkit.cli",
        "train",
        "--preset",
        preset,
        "--run-dir",
        str(run_dir),
        "--resume",
        resume,
    ]
    for item in overrides:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: write section.field=value, e.g. grpo.lr=1e-4")
        parts += ["--set", item]
    return shlex.join(parts)


def submit_training(
    preset: str,
    run_dir: str | Path,
    *,
    address: str | Cluster | None = None,
    resume: str = "latest",
    overrides: Sequence[str] = (),
    follow: bool = False,
    num_cpus: float | None = None,
) -> JobHandle:
    """Submit a training run as a Ray job named after the run directory; optionally follow its
    log to stdout until it ends."""
    if isinstance(address, Cluster):
        cluster = address
    else:
        cluster = connect(None if address is None or address in LOCAL else address)
    run_path = Path(run_dir)
    # The job's working directory is a shipped copy: a relative path would land inside it.
    entry = training_entrypoint(
        preset,
        run_path if run_path.is_absolute() else run_path.resolve(),
        resume=resume,
        overrides=overrides,
    )
    handle = cluster.submit(
        run_path.name,
        entry,
        num_cpus=num_cpus,
        metadata={"preset": preset, "run_dir": str(run_path), "backend": "local"},
    )
    if follow:
        asyncio.run(_print_tail(handle))
    return handle


async def _print_tail(handle: JobHandle) -> None:
    async for chunk in handle.tail():
        sys.stdout.write(chunk)
        sys.stdout.flush()
