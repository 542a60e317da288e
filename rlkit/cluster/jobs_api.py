"""Talking to a Ray Jobs API without hanging: a timeout on every HTTP request, a deadline on every
call, each failure one line naming the address: docs/decisions.md#jobs-api-never-ray-client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ray.job_submission import JobSubmissionClient

from rlkit.cluster.address import reach_advice, toolkit_reason, without_address_env
from rlkit.errors import RlkitError

DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Seconds one Jobs API request may take (why: docs/decisions.md#jobs-api-never-ray-client)."""


class TimedJobClient(JobSubmissionClient):
    """Ray's Jobs client with a timeout on every HTTP request (Ray's has none)."""

    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S

    def _do_request(self, method: str, endpoint: str, **kwargs: Any):
        kwargs.setdefault("timeout", self.request_timeout_s)
        return super()._do_request(method, endpoint, **kwargs)


class JobsApi(Protocol):
    """A connection to one Jobs API, as a job handle uses it (`rlkit.cluster.client.Cluster`)."""

    address: str
    client: JobSubmissionClient
    request_timeout_s: float
    """Each HTTP request's timeout; a whole call gets twice this (`call`)."""


def within_deadline[T](seconds: float, what: str, fn: Callable[[], T]) -> T:
    """Run `fn` in a daemon thread and give up after `seconds` (a request's timeout does not
    bound DNS resolution or a credential lookup)."""
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


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def call[T](api: JobsApi, what: str, fn: Callable[[], T], *, deadline_s: float | None = None) -> T:
    """One Jobs API call on `api`, its failures turned into one-line RlkitErrors."""
    try:
        return within_deadline(deadline_s or api.request_timeout_s * 2, what, fn)
    except RlkitError:
        raise
    except Exception as e:  # noqa: BLE001 - every transport failure gets the same advice
        raise RlkitError(f"{what} on {api.address} failed: {_first_line(e)}") from e


def open_client(url: str, timeout_s: float) -> TimedJobClient:
    """Ray's Jobs client on `url` within `timeout_s`, else a one-line RlkitError on what to check."""

    def make_client() -> TimedJobClient:
        with without_address_env():
            return TimedJobClient(url)

    try:
        return within_deadline(timeout_s, url, make_client)
    except TimeoutError as e:
        raise RlkitError(f"{url}: {e}; {reach_advice(url)}") from e
    except Exception as e:  # noqa: BLE001 - connection, DNS, auth and version errors alike
        reason = _first_line(e)
        raise RlkitError(
            f"cannot reach Ray Jobs API at {url} ({toolkit_reason(reason)}); "
            f"{reach_advice(url, reason)}"
        ) from e
