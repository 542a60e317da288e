"""What every process of a SkyRL job runs first (Ray's `worker_process_setup_hook`): rlkit's fixes,
and on a CPU preset the device seam and a thread budget: docs/skyrl-integration.md#fixes-to-skyrl-fixespy-worker_setuppy."""

from __future__ import annotations

import os

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Read by torch (and MKL) when a process starts: its intra-op thread count."""
DEVICE_ENV = "RLKIT_SKYRL_DEVICE"
""""cpu" in a CPU preset's job (the entry's `--device cpu`); unset on GPUs."""
HOOK = f"{__name__}.setup"


def cpu_threads(bundles: int, cores: int | None = None) -> int:
    """Threads per process on a CPU host: the host's cores shared by the job's colocated
    bundles (a bundle's rank and engine take turns, so each gets the bundle's share)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, bundles))


def runtime_env(env_vars: dict[str, str], device: str, bundles: int = 1) -> dict:
    """The runtime_env the entry passes to `ray.init` for SkyRL's experiment: on a CPU host,
    the device and a thread budget per process (`cpu_threads`) unless the job sets its own."""
    extra = {}
    if device == "cpu":
        threads = str(cpu_threads(bundles))
        extra = {DEVICE_ENV: device} | {k: os.environ.get(k, threads) for k in THREAD_ENV}
    return {"env_vars": {**extra, **env_vars}, "worker_process_setup_hook": HOOK}


def setup() -> None:
    """Ray's worker_process_setup_hook for SkyRL jobs. Imports nothing heavy: each patch is
    applied when SkyRL imports the module it patches."""
    from rlkit.cluster.skyrl import fixes

    fixes.install()
    if os.environ.get(DEVICE_ENV) == "cpu":
        from rlkit.cluster.skyrl import cpu_seam

        cpu_seam.install()
