"""Which Ray cluster an address means (the local head, a Jobs API URL, or HyperPod's
`sagemaker_ray://`); `resolve_address` alone decides. Each form: docs/decisions.md#what-an-address-means."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from rlkit.errors import RlkitError, UsageError

LOCAL = "local"
LOCAL_ALIASES = (LOCAL, "auto")
"""Spellings of the local head: rlkit's own, and Ray's."""
ADDRESS_ENV_VARS = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
"""Ray reads these silently; rlkit applies them only when no address is given, and says so."""


@dataclass(frozen=True)
class Address:
    """An address resolved: a Jobs API URL, or None for the local head."""

    url: str | None
    notes: tuple[str, ...] = ()
    """What the environment changed or was overruled in, one line each."""

    @property
    def local(self) -> bool:
        return self.url is None

    def __str__(self) -> str:
        return self.url or "the local Ray head (on this machine, started if needed)"


def resolve_address(address: str | None) -> Address:
    """Decide what `address` means (docs/decisions.md#what-an-address-means); a Ray Client or
    scheme-less address is a UsageError, sagemaker_ray:// without its toolkit an RlkitError."""
    env = next(((k, os.environ[k]) for k in ADDRESS_ENV_VARS if os.environ.get(k)), None)
    given = address.strip().rstrip("/") if address is not None else ""
    if not given:  # not given: the environment's address, else the local head
        if env is None:
            return Address(None)
        from_env = env[1].strip().rstrip("/")
        if from_env.lower() in LOCAL_ALIASES:  # Ray's own `auto`, or rlkit's `local`
            return Address(None, (f"using {env[0]}={env[1]}: the local Ray head",))
        note = f"using {env[0]}={env[1]} from the environment (unset it for a local head)"
        try:
            url = _check_url(from_env)
        except RlkitError as e:  # say where the value came from, and how to drop it
            raise type(e)(
                f"{env[0]} from the environment: {e}; or unset {env[0]} (or give --address)"
            ) from None
        return Address(url, (note,))
    notes = ()
    if env is not None and env[1].strip().rstrip("/") != given:
        notes = (f"ignoring {env[0]}={env[1]} from the environment: {given} was given",)
    return Address(None if given.lower() in LOCAL_ALIASES else _check_url(given), notes)


def _check_url(address: str) -> str:
    scheme = address.split("://", 1)[0] if "://" in address else ""
    if scheme == "ray":
        raise UsageError(
            f"{address}: ray:// (Ray Client) is not supported: it drops the job after 30 s "
            "without a connection; give the Jobs API address instead, e.g. http://HEAD:8265"
        )
    if scheme == "":
        raise UsageError(
            f"{address}: give a Jobs API URL such as http://HEAD:8265, sagemaker_ray://CLUSTER/"
            f"NAMESPACE or {LOCAL} (the dashboard port, not the GCS port 6379)"
        )
    if scheme == "sagemaker_ray":
        sagemaker_target(address)  # a missing RayCluster name is refused here, in one line
        if importlib.util.find_spec("sagemaker_ray") is None:
            raise RlkitError(
                f"{address} needs the toolkit-for-ray-on-sagemaker-ai package: "
                "pip install 'rlkit[sagemaker]' (or port-forward the head and use http://)"
            )
    if scheme not in ("http", "https", "sagemaker_ray"):
        raise UsageError(
            f"{address}: unknown scheme {scheme}://; use http(s)://, sagemaker_ray:// or {LOCAL}"
        )
    return address


@contextlib.contextmanager
def without_address_env() -> Iterator[None]:
    """Hide RAY_ADDRESS & co. while Ray's client resolves an explicit address."""
    saved = {k: os.environ.pop(k) for k in ADDRESS_ENV_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


SAGEMAKER_PREFIX = "sagemaker_ray://"


def sagemaker_target(address: str) -> tuple[str, str]:
    """(RayCluster name, namespace) of `sagemaker_ray://NAME/NAMESPACE`, as the toolkit reads it
    (no namespace means `default`)."""
    rest = address.removeprefix(SAGEMAKER_PREFIX).strip().rstrip("/")
    name, _, namespace = rest.partition("/")
    if not name:
        raise UsageError(
            f"{address}: name the RayCluster and its namespace, sagemaker_ray://RAYCLUSTER/"
            "NAMESPACE (rlkit's manifests: sagemaker_ray://rlkit/ray)"
        )
    return name, namespace or "default"


# The toolkit's failure messages, mapped to what is missing (its 404 means either).
_SAGEMAKER_CAUSES = (
    (
        "Resource not found",
        "no RayCluster {name!r} in namespace {ns!r}, or no HyperPod Ray endpoint operator: the "
        "first part is the RayCluster's name (kubectl get rayclusters -n {ns}), not the HyperPod "
        "cluster's; kubectl get crd raydashboardconnections.connection.access.sagemaker."
        "amazonaws.com shows the operator (deploy/README.md step 5)",
    ),
    (
        "Access denied",
        "only the RayCluster's creator may submit through the HyperPod endpoint: use the "
        "port-forward instead (kubectl port-forward -n {ns} svc/{name}-head-svc 8265:8265, then "
        "http://127.0.0.1:8265)",
    ),
    (
        "connection URL",
        "the endpoint operator gave no URL: it needs the SageMaker Spaces add-on (Active, web "
        "browser access on) and the EKS Pod Identity Agent add-on (deploy/README.md step 5)",
    ),
    (
        "kubeconfig",
        "this machine has no kubeconfig for the EKS cluster: aws eks update-kubeconfig --name "
        "EKS_CLUSTER (its role needs an EKS access entry, deploy/README.md step 4)",
    ),
    (
        "Authentication failed",
        "the EKS credentials were refused: aws eks update-kubeconfig --name EKS_CLUSTER with a "
        "role that has an EKS access entry (deploy/README.md step 4)",
    ),
)


_TOOLKIT_KUBECONFIG_COMMAND = re.compile(
    r"\s*(?:For EKS clusters, )?(?:[Tt]ry running|[Rr]un): aws eks update-kubeconfig "
    r"--cluster-name \S+\s*$"
)


def toolkit_reason(error: str) -> str:
    """The toolkit's failure message without its wrong `aws eks update-kubeconfig --cluster-name`
    hint (the flag is `--name`; `reach_advice` names the right command)."""
    return _TOOLKIT_KUBECONFIG_COMMAND.sub("", error).rstrip() or error


def reach_advice(address: str, error: str = "") -> str:
    """What to check when `address` does not answer (sagemaker_ray://: read from `error`)."""
    if address.startswith(SAGEMAKER_PREFIX):
        name, ns = sagemaker_target(address)
        for marker, advice in _SAGEMAKER_CAUSES:
            if marker.lower() in error.lower():
                return advice.format(name=name, ns=ns)
        return (
            f"check AWS credentials, the kubeconfig, that RayCluster {name!r} runs in namespace "
            f"{ns!r} and that the HyperPod Ray endpoint operator is installed; or port-forward"
        )
    return "check the head is up and the dashboard port (8265) is reachable or port-forwarded"
