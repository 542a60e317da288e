"""What every process of a SkyRL job runs first: rlkit's fixes to SkyRL, and on a CPU preset
the device seam.

SkyRL builds its FSDP workers, vLLM servers and trainer as Ray actors and tasks in processes
rlkit never calls into. Ray runs a job's `worker_process_setup_hook` in each of them before
any task, so `rlkit.cluster.skyrl.entry` starts Ray for SkyRL's experiment with
`runtime_env()`: this module's `setup` as the hook, and the device in the environment.

On a CPU host every process of the job also gets a thread budget (`cpu_threads`). Each
colocated bundle (one FSDP rank, one vLLM engine, its API server) shares the host's cores with
the others, and torch's default of one OpenMP thread per core made every small tensor copy wait
on a thread another process had the core for: on 2 cores, cloning a 55 kB image tensor took
3 ms with 2 threads and 8 us with 1, and such copies were ~28% of the vLLM API server's and of
the generator's time (py-spy on the CPU preset's generate step).
"""

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
