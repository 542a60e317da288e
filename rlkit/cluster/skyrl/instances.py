"""The cluster's hardware: HyperPod's `ml.g7e` sizes and what one worker pod may take. Sources:
docs/cluster.md#the-mlg7e-table-and-its-sources."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlkit.errors import UsageError


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: int
    memory_gib: int
    efa: int
    """EFA interfaces (`vpc.amazonaws.com/efa`); 0: multi-node traffic goes over TCP."""
    gpu_memory_gib: int = 96


G7E: dict[str, InstanceType] = {
    i.name: i
    for i in (
        InstanceType("ml.g7e.2xlarge", gpus=1, vcpus=8, memory_gib=64, efa=0),
        InstanceType("ml.g7e.4xlarge", gpus=1, vcpus=16, memory_gib=128, efa=0),
        InstanceType("ml.g7e.8xlarge", gpus=1, vcpus=32, memory_gib=256, efa=1),
        InstanceType("ml.g7e.12xlarge", gpus=2, vcpus=48, memory_gib=512, efa=1),
        InstanceType("ml.g7e.24xlarge", gpus=4, vcpus=96, memory_gib=1024, efa=2),
        InstanceType("ml.g7e.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa=4),
    )
}
DEFAULT_INSTANCE = "ml.g7e.48xlarge"


def instance_type(name: str) -> InstanceType:
    if name not in G7E:
        raise UsageError(f"unknown instance type {name!r}; choose from {', '.join(G7E)}")
    return G7E[name]


SYSTEM_SHARE = 1 / 8
"""Of a node's vCPUs and memory, what the worker pod leaves to the kubelet, agents, a head pod."""
SHM_MAX_GIB = 64
"""/dev/shm for NCCL and vLLM (memory-backed: it counts against the pod's memory)."""


@dataclass(frozen=True)
class PodShape:
    """What the one Ray worker pod on a node asks Kubernetes for (requests == limits)."""

    gpus: int
    cpus: int
    memory_gib: int
    efa: int
    """All of the node's EFA interfaces when the run spans nodes, else none."""
    shm_gib: int


def pod_shape(inst: InstanceType, gpus: int, nodes: int) -> PodShape:
    """The worker pod for `gpus` of `inst`'s GPUs: vCPUs and memory in proportion, less
    SYSTEM_SHARE; EFA only for a multi-node run (mixing EFA and non-EFA pods hangs NCCL)."""
    share = gpus / inst.gpus * (1 - SYSTEM_SHARE)
    memory = math.floor(inst.memory_gib * share)
    return PodShape(
        gpus=gpus,
        cpus=math.floor(inst.vcpus * share),
        memory_gib=memory,
        efa=inst.efa if nodes > 1 else 0,
        shm_gib=min(SHM_MAX_GIB, memory // 4),
    )


TRAIN_BYTES_PER_PARAM = 16
"""FSDP2 training state per parameter: fp32 weights, fp32 gradients, Adam's two fp32 moments."""
REF_BYTES_PER_PARAM = 2
"""The reference policy (KL loss) in bf16, sharded like the policy."""
GPU_STATE_SHARE = 0.8
"""Of a GPU, what the sharded training state may fill (the rest: activations, vLLM)."""


def check_layout(
    inst: InstanceType, gpus_per_node: int, nodes: int, params_b: float, driver_memory_gb: int
) -> PodShape:
    """The worker pod of this layout, or a one-line UsageError naming what the instance lacks."""
    if gpus_per_node > inst.gpus:
        raise UsageError(
            f"{inst.name} has {inst.gpus} GPU(s), the layout asks {gpus_per_node} per node: "
            "lower gpus_per_node or choose a larger instance_type"
        )
    if nodes > 1 and not inst.efa:
        raise UsageError(
            f"{inst.name} has no EFA, so {nodes} nodes would all-reduce over TCP: use nodes=1 or "
            "ml.g7e.8xlarge or larger"
        )
    pod = pod_shape(inst, gpus_per_node, nodes)
    if driver_memory_gb > pod.memory_gib - pod.shm_gib:
        raise UsageError(
            f"SkyRL's trainer task reserves {driver_memory_gb} GiB, a {inst.name} worker pod with "
            f"{gpus_per_node} GPU(s) has {pod.memory_gib - pod.shm_gib} GiB besides /dev/shm: "
            "lower driver_memory_gb or take more of a larger instance"
        )
    need = params_b * 1e9 * (TRAIN_BYTES_PER_PARAM + REF_BYTES_PER_PARAM) / 2**30
    need /= gpus_per_node * nodes
    room = inst.gpu_memory_gib * GPU_STATE_SHARE
    if need > room:
        raise UsageError(
            f"a {params_b:g} B model's training state is ~{need:.0f} GiB per GPU over "
            f"{gpus_per_node * nodes} GPU(s), over {room:.0f} GiB of a {inst.gpu_memory_gib} GiB "
            "GPU: add nodes or GPUs per node"
        )
    return pod
