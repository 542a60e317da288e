"""The KubeRay RayCluster of a SkyRL preset: deploy/raycluster.yaml with its GPU worker group sized
from the preset's instance and layout (`rlkit.cluster.skyrl.instances`), EFA on every pod when
the run spans nodes.

    rlkit submit --preset qwen3vl-8b --nodes 2 --raycluster runs/rlkit-2x8.raycluster.yaml
What follows from the preset, and why: docs/decisions.md.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

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
    `image` (a registry URI, e.g. what deploy/build-image.sh printed) in every container."""
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
