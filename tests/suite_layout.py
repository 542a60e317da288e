"""How the suite is tiered and spread over xdist workers (tests/conftest.py applies it).

- Tier: a test is `slow` (integration) when it is marked so or needs an `INTEGRATION_FIXTURES`
  fixture; `fast` otherwise. Each tier has its own per-test deadline.
- Group: the unit one worker runs whole. A test file is a group, so its module fixtures are
  built once; every file that names a `SHARED_FIXTURES` session fixture joins that fixture's
  group, so the fixture is built once. Groups come from node ids alone: xdist's controller
  schedules without collecting.
- Queue: the SkyRL CPU run's group first (the longest), then groups with slow tests, then the
  rest, each in collection order.
- Threads: workers share the cores (`worker_threads`), and every OpenMP runtime they start
  waits passively (`WORKER_ENV`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

TESTS = Path(__file__).parent
INTEGRATION_FIXTURES = frozenset({"ray_cluster", "skyrl_cpu_run"})
"""Fixtures that make a test `slow` wherever it lives."""
SHARED_FIXTURES = {
    "skyrl_cpu_run": "skyrl-cpu-run",
    "skyrl_run_dir": "skyrl-cpu-run",  # a copy of that run's dir
    "skyrl_qwen_step": "skyrl-cpu-run",  # a second SkyRL run: never beside the first
    "skyrl_eval": "skyrl-eval",
    "tiny_server": "skyrl-vllm-server",  # one vLLM server for the real-engine files
}
"""Session fixtures read by several files -> the group every file naming them belongs to."""
FIRST_GROUP = "skyrl-cpu-run"
"""The longest group (the SkyRL CPU run): queued first, so it runs beside everything else."""
TIMEOUT_S = {"fast": 150, "slow": 420}
"""Per-test deadlines by tier: a hang fails in minutes, not at pytest-timeout's usual 600 s. A
test that pays for a long shared artifact (the SkyRL CPU run) sets its own `timeout` mark."""


JOBS_API_TIMEOUT_S = 30.0
"""Per-request timeout of the suite's local heads' Jobs API (rlkit's default, set again for the
suite's own heads). Measured: a submission with its working-dir upload timed out at 10 s while
the machine was oversubscribed."""
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Set in each worker, inherited by what it starts (trainer jobs, kernels, vLLM, Ray's
workers). An OpenMP thread that finds no work spins for a while before it sleeps; with more
threads than cores, the spinning threads hold the cores the working ones need."""


def worker_threads(workers: int, cores: int) -> int:
    """Torch threads for each of `workers` xdist workers on `cores` cores: a fair share, at least
    one. Torch's default (every core in every worker) oversubscribes the cores: measured on 2
    cores with 2 workers, a 1.6 s warm-start test took 28.4 s beside the other worker."""
    return max(1, cores // max(1, workers))


def shared_groups(sources: dict[str, str]) -> dict[str, str]:
    """{file as node ids spell it: its text} -> {file: group} for files naming a shared fixture."""
    groups = {}
    for path, text in sources.items():
        for fixture, group in SHARED_FIXTURES.items():
            if re.search(rf"\b{fixture}\b", text):
                groups[path] = group
    return groups


@functools.cache
def file_groups() -> dict[str, str]:
    files = sorted(TESTS.rglob("test_*.py"))
    return shared_groups({p.relative_to(TESTS.parent).as_posix(): p.read_text() for p in files})


def group_of(nodeid: str, groups: dict[str, str] | None = None) -> str:
    """A test's group: its file's shared fixture group, else the file itself."""
    path = nodeid.split("::", 1)[0]
    return (file_groups() if groups is None else groups).get(path, path)


def tier(marked_slow: bool, fixtures: Iterable[str]) -> str:
    return "slow" if marked_slow or INTEGRATION_FIXTURES & set(fixtures) else "fast"


def misplaced(nodeid: str, fixtures: Iterable[str], groups: dict[str, str] | None = None):
    """The shared fixture a test uses outside that fixture's group (None when all is well):
    it would be built on a second worker."""
    group = group_of(nodeid, groups)
    used = set(fixtures)
    return next((f for f, g in SHARED_FIXTURES.items() if f in used and g != group), None)


def queue_order(nodeids: list[str], slow_groups: set[str], groups=None) -> list[str]:
    """`nodeids` reordered into the queue (stable within a rank)."""

    def rank(nodeid: str) -> int:
        group = group_of(nodeid, groups)
        return 0 if group == FIRST_GROUP else 1 if group in slow_groups else 2

    return sorted(nodeids, key=rank)


def scheduler_class():
    """xdist's scope scheduler with these groups as the scopes (xdist's own `loadgroup` reads a
    node id suffix that pytest 9.2 no longer keeps)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling
