"""A KubeRay RayJob for a SkyRL run: the production way to heal a run with nobody watching.

    rlkit submit --preset qwen3vl-8b-6gpu --rayjob runs/maze-8b-a.rayjob.yaml
    kubectl apply -n ray -f runs/maze-8b-a.rayjob.yaml

KubeRay (>= 1.2) retries a failed RayJob up to `backoffLimit` times, each retry on a NEW
RayCluster built from `rayClusterSpec` (here: deploy/raycluster.yaml's spec, so the two never
drift; its worker group sized for the preset by `rlkit.cluster.raycluster`, with EFA when the
run spans nodes), so a run resumes from /fsx alone: its datasets, checkpoints and exports live in the
run dir there. The entrypoint is the same SkyRL command `rlkit submit` sends, run from the
runtime image's own rlkit (a RayJob uploads no working dir); tokens for loggers belong in a
Kubernetes Secret referenced from the cluster template, never in this file. Deliberately absent:
`activeDeadlineSeconds` (a deadline failure is not retried) and `clusterSelector` (KubeRay >= 1.6
rejects it together with `backoffLimit`). `ttlSecondsAfterFinished` deletes the finished job's
cluster an hour after the end (its logs and the run dir stay on /fsx).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.cluster.jobs import run_slug
from rlkit.cluster.raycluster import CLUSTER_TEMPLATE, raycluster, write_manifest
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
) -> dict[str, Any]:
    """The RayJob manifest (a dict) for one run of `preset`."""
    if not 1 <= backoff_limit <= 10:
        raise UsageError(f"backoff limit ({backoff_limit}) must be 1..10 retries")
    cluster = raycluster(preset, cluster_template)
    name = run_slug(run_name)
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


def write_rayjob(path: str | Path, manifest: dict[str, Any]) -> Path:
    return write_manifest(path, manifest)
