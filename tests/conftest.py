"""Shared fixtures, the suite's tiers and how it runs in parallel.

Tiers: `slow` marks integration tests (a Ray head, vLLM, a Jupyter kernel or browser, training
subprocesses). `make test-fast` runs the rest (`-m "not slow"`), `make test` everything. A test
is `slow` when it says so or when it needs one of the integration fixtures below.

Parallel (`make test` runs `pytest -n 2 --dist loadscope`): each test file is one group that
one worker runs whole, so its module fixtures are built once; the files that read a shared
session fixture (the SkyRL CPU run, SkyRL's scripted eval) form one group, so it is built once.
Groups are queued heaviest first (the SkyRL run, then files with slow tests), so the long run
starts at once beside the rest. Each worker starts its own local Ray head (own ports and temp
dir) for the tests that need one.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from rlkit.cluster.localhead import free_port

TESTS = Path(__file__).parent
INTEGRATION_FIXTURES = frozenset({"ray_cluster", "skyrl_cpu_run"})
"""Fixtures that make a test `slow` wherever it lives."""
SHARED_FIXTURES = {
    "skyrl_cpu_run": "skyrl-cpu-run",
    "skyrl_run_dir": "skyrl-cpu-run",  # a copy of that run's dir
    "skyrl_eval": "skyrl-eval",
}
"""Session fixtures read by several files -> the group every file naming them belongs to."""
FIRST_GROUP = "skyrl-cpu-run"
"""The longest group (the SkyRL CPU run): queued first, so it runs beside everything else."""
TIMEOUT_S = {"fast": 150, "slow": 420}
"""Per-test deadlines by tier: a hang fails in minutes. A test that pays for a long shared
artifact (the SkyRL CPU run) sets its own `timeout` mark."""


@functools.cache
def file_groups() -> dict[str, str]:
    """Test files (as node ids spell them) that name a shared fixture -> its group."""
    groups = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text()
        for fixture, group in SHARED_FIXTURES.items():
            if re.search(rf"\b{fixture}\b", text):
                groups[path.relative_to(TESTS.parent).as_posix()] = group
    return groups


def group_of(nodeid: str) -> str:
    """A test's group: its shared fixture's, else its file (found without collecting, as
    xdist's controller knows only node ids)."""
    path = nodeid.split("::", 1)[0]
    return file_groups().get(path, path)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` with this suite's groups as the scopes (xdist's own `loadgroup` reads
    a node id suffix that pytest 9.2 no longer keeps)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_groups = set()
    for item in items:
        group = group_of(item.nodeid)
        for fixture, shared in SHARED_FIXTURES.items():
            if fixture in item.fixturenames and group != shared:
                raise pytest.UsageError(
                    f"{item.nodeid} uses the session fixture {fixture} without naming it: "
                    f"add it to SHARED_FIXTURES in tests/conftest.py, so one worker builds it"
                )
        if INTEGRATION_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        tier = "slow" if item.get_closest_marker("slow") else "fast"
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S[tier]))
        if tier == "slow":
            slow_groups.add(group)

    def queue_rank(item: pytest.Item) -> int:
        group = group_of(item.nodeid)
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
