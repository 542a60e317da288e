"""The KubeRay manifests of a SkyRL preset: the RayCluster sized from its instance and layout, and
the RayJob on it that heals a run with nobody watching. What each sets and why:
docs/decisions.md#the-raycluster-manifest."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rlkit.cluster.jobs import run_slug
from rlkit.cluster.skyrl.overrides import RunPaths, entrypoint_command
from rlkit.cluster.skyrl.presets import SkyRLPreset
from rlkit.cluster.workdir import project_root
from rlkit.errors import UsageError

CLUSTER_TEMPLATE = project_root() / "deploy" / "raycluster.yaml"
INSTANCE_LABEL = "node.kubernetes.io/instance-type"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
IMAGE_PLACEHOLDER = "ACCOUNT.dkr.ecr.REGION"
"""What the template's image starts with until `--image` (deploy/build-image.sh's output)."""
EFA_ENV = {
    "FI_PROVIDER": "efa",  # NCCL's aws-ofi-nccl plugin over EFA, not TCP sockets
    "FI_EFA_FORK_SAFE": "1",  # Ray and vLLM fork worker processes after libfabric loads
}


def load_template(path: str | Path = CLUSTER_TEMPLATE) -> dict[str, Any]:
    template = Path(path)
    if not template.is_file():
        raise UsageError(
            f"no RayCluster template at {template}: pass the deploy/raycluster.yaml path"
        )
    cluster = yaml.safe_load(template.read_text())
    if cluster.get("kind") != "RayCluster":
        raise UsageError(f"{template} is a {cluster.get('kind')!r}, not a RayCluster manifest")
    return cluster


def containers(cluster_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a RayCluster spec: the head's, then each worker group's."""
    groups = [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def raycluster(
    preset: SkyRLPreset, template: str | Path = CLUSTER_TEMPLATE, *, image: str | None = None
) -> dict[str, Any]:
    """The RayCluster manifest (a dict) whose worker group fits `preset` on its instance type;
    `image` (a registry URI) in every container."""
    pod = preset.pod
    if pod is None:
        raise UsageError(
            f"a preset without instance_type ({preset.layout.device} host) has no RayCluster: "
            "set instance_type, e.g. ml.g7e.48xlarge"
        )
    cluster = copy.deepcopy(load_template(template))
    groups = cluster["spec"]["workerGroupSpecs"]
    if len(groups) != 1:
        raise UsageError(
            f"the RayCluster template has {len(groups)} worker groups, rlkit sizes one"
        )
    group = groups[0]
    group["replicas"] = group["minReplicas"] = preset.layout.nodes
    group["maxReplicas"] = max(group.get("maxReplicas", preset.layout.nodes), preset.layout.nodes)
    group["rayStartParams"]["num-gpus"] = str(pod.gpus)
    spec = group["template"]["spec"]
    spec["nodeSelector"][INSTANCE_LABEL] = preset.layout.instance_type
    (worker,) = spec["containers"]
    amounts = {
        "cpu": str(pod.cpus),
        "memory": f"{pod.memory_gib}Gi",
        "nvidia.com/gpu": str(pod.gpus),
    }
    if pod.efa:
        amounts[EFA_RESOURCE] = str(pod.efa)
    worker["resources"] = {"requests": dict(amounts), "limits": dict(amounts)}
    env = [e for e in worker.get("env", []) if e["name"] not in EFA_ENV]
    if pod.efa:
        env += [{"name": k, "value": v} for k, v in EFA_ENV.items()]
    worker["env"] = env
    for volume in spec["volumes"]:
        if volume["name"] == "dshm":
            volume["emptyDir"]["sizeLimit"] = f"{pod.shm_gib}Gi"
    if image is not None:
        if not image.strip() or any(ch.isspace() for ch in image):
            raise UsageError(
                f"--image {image!r}: give the image URI, e.g. what build-image.sh printed"
            )
        for container in containers(cluster["spec"]):
            container["image"] = image
    return cluster


def check_image(manifest: dict[str, Any]) -> None:
    """UsageError in one line when a container still runs the template's placeholder image."""
    spec = manifest["spec"].get("rayClusterSpec", manifest["spec"])
    if any(c["image"].startswith(IMAGE_PLACEHOLDER) for c in containers(spec)):
        raise UsageError(
            f"the manifest's image is still the placeholder {IMAGE_PLACEHOLDER}...: pass --image "
            "URI (deploy/build-image.sh prints it; deploy/README.md step 3)"
        )


def write_manifest(path: str | Path, manifest: dict[str, Any]) -> Path:
    """Write a RayCluster or RayJob manifest; one still on the placeholder image is refused."""
    check_image(manifest)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(manifest, sort_keys=False, width=100))
    return out


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
