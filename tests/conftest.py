"""Shared fixtures. One real local Ray head serves every test that needs a cluster."""

import pytest

from rlkit.cluster.localhead import free_port


@pytest.fixture
def port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (yet)."""
    return free_port()


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray head (dashboard + Jobs API on 127.0.0.1), stopped after the session."""
    from rlkit.cluster.client import connect

    c = connect(local_port=free_port(), local_num_cpus=2)
    assert c.local_head is not None and c.local_head.started
    try:
        yield c
    finally:
        c.local_head.stop()
