"""What every process of a SkyRL job runs first: rlkit's fixes to SkyRL, and on a CPU preset
the device seam.

SkyRL builds its FSDP workers, vLLM servers and trainer as Ray actors and tasks in processes
rlkit never calls into. Ray runs a job's `worker_process_setup_hook` in each of them before
any task, so `rlkit.cluster.skyrl.entry` starts Ray for SkyRL's experiment with
`runtime_env()`: this module's `setup` as the hook, and the device in the environment.
"""

from __future__ import annotations

import os

DEVICE_ENV = "RLKIT_SKYRL_DEVICE"
""""cpu" in a CPU preset's job (the entry's `--device cpu`); unset on GPUs."""
HOOK = f"{__name__}.setup"


def runtime_env(env_vars: dict[str, str], device: str) -> dict:
    """The runtime_env the entry passes to `ray.init` for SkyRL's experiment."""
    extra = {DEVICE_ENV: device} if device == "cpu" else {}
    return {"env_vars": {**env_vars, **extra}, "worker_process_setup_hook": HOOK}


def setup() -> None:
    """Ray's worker_process_setup_hook for SkyRL jobs. Imports nothing heavy: each patch is
    applied when SkyRL imports the module it patches."""
    from rlkit.cluster.skyrl import fixes

    fixes.install()
    if os.environ.get(DEVICE_ENV) == "cpu":
        from rlkit.cluster.skyrl import cpu_seam

        cpu_seam.install()
