"""Reaching a Ray Jobs API: which address (the environment's RAY_ADDRESS & co. applied visibly,
Ray Client refused), a timeout on every HTTP request, a wall-clock deadline on connecting, and
one line of advice when the head cannot be reached. `rlkit.cluster.client.connect` uses these.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ray.job_submission import JobSubmissionClient

from rlkit.cluster.jobs import DEFAULT_REQUEST_TIMEOUT_S
from rlkit.cluster.localhead import ADDRESS_ENV_VARS
from rlkit.errors import RlkitError, UsageError


class TimedJobClient(JobSubmissionClient):
    """Ray's Jobs client with a timeout on every HTTP request.

    Ray's client sends its requests without a timeout, so a head that accepts the connection
    but never answers would hang a notebook cell forever.
    """

    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S

    def _do_request(self, method: str, endpoint: str, **kwargs: Any):
        kwargs.setdefault("timeout", self.request_timeout_s)
        return super()._do_request(method, endpoint, **kwargs)


def within_deadline[T](seconds: float, what: str, fn: Callable[[], T]) -> T:
    """Run `fn` in a daemon thread and give up after `seconds`.

    A per-request timeout does not bound DNS resolution or a credential lookup, so connecting
    needs a wall-clock deadline of its own.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


@contextlib.contextmanager
def without_address_env() -> Iterator[None]:
    """Hide RAY_ADDRESS & co. while Ray's client resolves an explicit address."""
    saved = {k: os.environ.pop(k) for k in ADDRESS_ENV_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def resolve_address(address: str | None) -> tuple[str | None, list[str]]:
    """Apply the environment's address variables visibly; refuse Ray Client addresses."""
    notes: list[str] = []
    env = next(((k, os.environ[k]) for k in ADDRESS_ENV_VARS if os.environ.get(k)), None)
    if address is None and env is not None:
        address = env[1]
        notes.append(f"using {env[0]}={env[1]} from the environment (unset it for a local head)")
    elif env is not None and env[1] != address:
        notes.append(f"ignoring {env[0]}={env[1]} from the environment: {address} was given")
    if address is not None:
        address = address.strip().rstrip("/")
        scheme = address.split("://", 1)[0] if "://" in address else ""
        if scheme == "ray":
            raise UsageError(
                f"{address}: ray:// (Ray Client) is not supported: it drops the job after 30 s "
                "without a connection; give the Jobs API address instead, e.g. http://HEAD:8265"
            )
        if scheme == "":
            raise UsageError(
                f"{address}: give a Jobs API URL such as http://HEAD:8265 or "
                "sagemaker_ray://CLUSTER/NAMESPACE (the dashboard port, not the GCS port 6379)"
            )
        if scheme == "sagemaker_ray" and importlib.util.find_spec("sagemaker_ray") is None:
            raise RlkitError(
                f"{address} needs the toolkit-for-ray-on-sagemaker-ai package: "
                "pip install 'rlkit[sagemaker]' (or port-forward the head and use http://)"
            )
        if scheme not in ("http", "https", "sagemaker_ray"):
            raise UsageError(
                f"{address}: unknown scheme {scheme}://; use http(s):// or sagemaker_ray://"
            )
    return address, notes


def reach_advice(address: str) -> str:
    if address.startswith("sagemaker_ray://"):
        return "check AWS credentials, kubeconfig and that the HyperPod Ray endpoint is installed"
    return "check the head is up and the dashboard port (8265) is reachable or port-forwarded"
