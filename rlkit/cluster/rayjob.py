"""A KubeRay RayJob for a SkyRL run: the production way to heal a run with nobody watching
(KubeRay retries it up to `backoffLimit` times, each on a new RayCluster; the run resumes
from /fsx). Tokens reach it through a Kubernetes Secret, never this file.

    rlkit submit --preset qwen3vl-8b --run-name maze-a --rayjob runs/maze-a.rayjob.yaml --image URI
What it sets and leaves out, and why: docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.cluster.jobs import run_slug
from rlkit.cluster.raycluster import CLUSTER_TEMPLATE, containers, raycluster, write_manifest
from rlkit.cluster.skyrl.overrides import RunPaths, entrypoint_command
from rlkit.cluster.skyrl.presets import SkyRLPreset
from rlkit.errors import UsageError

TTL_AFTER_FINISHED_S = 3600


def rayjob(
    preset: SkyRLPreset,
    run_name: str,
    *,
    backoff_limit: int = 3,
    cluster_template: str | Path = CLUSTER_TEMPLATE,
    preset_name: str | None = None,
    image: str | None = None,
    env: Sequence[str] = (),
) -> dict[str, Any]:
    """The RayJob manifest (a dict) for one run of `preset`; `env` names variables every pod
    reads from the run's Secret (`env_secret(run_name)`)."""
    if not 1 <= backoff_limit <= 10:
        raise UsageError(f"backoff limit ({backoff_limit}) must be 1..10 retries")
    cluster = raycluster(preset, cluster_template, image=image)
    name = run_slug(run_name)
    secret = env_secret(name)
    for container in containers(cluster["spec"]):
        refs = [{"name": n, "valueFrom": {"secretKeyRef": {"name": secret, "key": n}}} for n in env]
        container["env"] = [e for e in container.get("env", []) if e["name"] not in env] + refs
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "rlkit", "rlkit/run": name},
        },
        "spec": {
            "entrypoint": entrypoint_command(preset, name, preset_name),
            "metadata": {"rlkit_run_name": name, "run_dir": RunPaths.for_run(preset, name).run_dir},
            "backoffLimit": backoff_limit,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "submissionMode": "K8sJobMode",
            "rayClusterSpec": cluster["spec"],
        },
    }


def env_secret(run_name: str) -> str:
    """The Kubernetes Secret a run's forwarded variables live in."""
    return f"{run_slug(run_name)}-env"


def secret_command(run_name: str, env: Sequence[str], namespace: str = "ray") -> str:
    """The kubectl line that puts this shell's values of `env` into the run's Secret."""
    literals = " ".join(f'--from-literal={n}="${n}"' for n in env)
    return f"kubectl create secret generic {env_secret(run_name)} -n {namespace} {literals}"


def write_rayjob(path: str | Path, manifest: dict[str, Any]) -> Path:
    return write_manifest(path, manifest)
