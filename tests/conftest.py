"""Shared fixtures, the suite's tiers and how it runs in parallel.

Tiers: `slow` marks integration tests (a Ray head, vLLM, a Jupyter kernel or browser, training
subprocesses). `make test-fast` runs the rest (`-m "not slow"`), `make test` everything. A test
is `slow` when it says so or when it needs one of `INTEGRATION_FIXTURES`.

Parallel (`make test` runs `pytest -n 2 --dist loadgroup`): each test file is one xdist group,
so its module fixtures are built once, on one worker; every test that reads the session's SkyRL
CPU run is in one group of its own, so that run happens once. Groups are queued heaviest first
(the SkyRL run, then files with slow tests), so the long run starts at once beside the rest.
Each worker starts its own local Ray head (own ports and temp dir) for the tests that need one.
"""

from __future__ import annotations

import pytest

from rlkit.cluster.localhead import free_port

INTEGRATION_FIXTURES = frozenset({"ray_cluster", "skyrl_cpu_run"})
"""Fixtures that make a test `slow` wherever it lives."""
SHARED_GROUPS = {"skyrl_cpu_run": "skyrl-cpu-run", "skyrl_eval": "skyrl-eval"}
"""Session fixtures read by several files: their tests share one group, so one worker builds
each of them once."""
FIRST_GROUP = "skyrl-cpu-run"
TIMEOUT_S = {"fast": 90, "slow": 420}
"""Per-test deadlines by tier: a hang fails in minutes. A test that pays for a long shared
artifact (the SkyRL CPU run) sets its own `timeout` mark."""


def _group(item: pytest.Item) -> str:
    for fixture, group in SHARED_GROUPS.items():
        if fixture in item.fixturenames:
            return group
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_groups = set()
    for item in items:
        if INTEGRATION_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        tier = "slow" if item.get_closest_marker("slow") else "fast"
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S[tier]))
        group = _group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        if tier == "slow":
            slow_groups.add(group)

    def queue_rank(item: pytest.Item) -> int:
        group = _group(item)
        return 0 if group == FIRST_GROUP else 1 if group in slow_groups else 2

    items.sort(key=queue_rank)  # stable: collection order within a rank


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
    try:
        yield c
    finally:
        c.local_head.stop()
