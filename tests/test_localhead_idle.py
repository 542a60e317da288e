"""A lean local head (the suite's: `LEAN_ENV`) runs only the Ray processes rlkit reads, and what
rlkit reads still answers on it (`rlkit.cluster.localhead`: `DASHBOARD_MODULES`, `IDLE_ENV`): the dashboard's modules are
those named, the metrics port serves Ray's Prometheus page with the node gauges SkyRL's GPU
monitor reads, and a Ray task's output reaches its job's log (the log monitor's work). The Jobs
API and the state API's nodes are `test_cluster.py`'s; the bridge's gauges scraped from the
head are the SkyRL CPU run's (`tests/skyrl/cpu_run.py`)."""

from __future__ import annotations

import time
import urllib.request

import pytest

from rlkit.cluster.localhead import DASHBOARD_MODULES, _group_members

DEADLINE_S = 120.0
"""A loaded 2-core head: Ray's node gauges come every 5 s, a job's driver starts in ~10 s."""


@pytest.fixture(scope="module")
def head(ray_cluster):
    """The session's one real local head (tests/conftest.py)."""
    return ray_cluster.local_head


def test_the_dashboard_runs_only_the_modules_rlkit_reads(head):
    # each module is a process titled `ray-dashboard-<Module>-<n>`; all six others absent says
    # the `ray start` hook still reaches Ray's dashboard
    titles = [cmd.replace(b"\0", b" ").split()[0].decode() for cmd in _group_members(head.pgid)]
    modules = {t.split("-")[2] for t in titles if t.startswith("ray-dashboard-")}
    assert modules == set(DASHBOARD_MODULES)


def test_the_metrics_port_serves_rays_node_gauges(head):
    url = f"http://127.0.0.1:{head.metrics_port}/metrics"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        if "\nray_node_mem_used{" in page or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert "\nray_node_mem_used{" in page, page[:2000]


def test_a_ray_tasks_output_reaches_its_jobs_log(ray_cluster):
    code = (
        "import time, ray; ray.init(); "
        "ray.get(ray.remote(lambda: print('from a ray', 'task', flush=True)).remote()); "
        "time.sleep(600)"
    )
    job = ray_cluster.submit("task-output", f'python -c "{code}"')
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "from a ray task" not in (logs := job.logs()) and time.monotonic() < deadline:
            time.sleep(1)
        assert "from a ray task" in logs, logs[-2000:]
    finally:
        job.stop()
