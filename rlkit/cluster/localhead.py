"""The local head: the Ray head rlkit starts, or reuses, on this machine, in a process group of its
own (it outlives the kernel; stopping it ends nothing else): docs/decisions.md#the-local-head."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from rlkit.cluster.address import ADDRESS_ENV_VARS
from rlkit.errors import RlkitError

DEFAULT_DASHBOARD_PORT = 8265
"""Ray's own default: the local head's Jobs API is `http://127.0.0.1:8265`."""
LOGICAL_GPUS = 2
"""Logical GPUs the local head offers (none real) for SkyRL's CPU preset, each with a CPU more."""
LEAN_ENV = "RLKIT_LEAN_RAY_DASHBOARD"
"""Set to 1 (the test suite does), a local head's dashboard loads `DASHBOARD_MODULES` only."""
DASHBOARD_MODULES = ("JobHead", "NodeHead", "StateHead", "EventHead")
"""The dashboard modules a lean local head loads (why each: docs/decisions.md#the-local-head)."""
IDLE_ENV = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "METRICS_RECORD_INTERVAL_S": "60"}
"""Ray settings that slow what a local head does while idle (docs/decisions.md#cluster)."""
_RAY_START = f"""# ray start, loading only the dashboard modules a local head needs
import sys
import ray._private.services as services
from ray.scripts.scripts import main
start_ray_process = services.start_ray_process
def start_dashboard_modules(command, process_type, *args, **kwargs):
    if process_type == "dashboard":
        command = [*command, "--modules-to-load={",".join(DASHBOARD_MODULES)}"]
    return start_ray_process(command, process_type, *args, **kwargs)
services.start_ray_process = start_dashboard_modules
sys.argv[0] = "ray"
sys.exit(main())
"""
"""`ray start` with the dashboard's `--modules-to-load`, which the CLI lacks."""
LOCAL_HEAD_START_TIMEOUT_S = 240.0
"""Seconds a local head may take to start (Ray's own 30 s is too short on busy cores)."""


def _state_file(port: int) -> Path:
    return Path(tempfile.gettempdir()) / "rlkit-ray" / f"head-{port}.json"


def ray_temp_dir(port: int) -> Path:
    """The Ray temp dir of the local head on `port`: its own, and short (Ray's socket paths)."""
    return Path("/tmp/rlkit-ray") / f"ray-{port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _dashboard_answers(url: str, *, node_alive: bool = False) -> bool:
    """Whether a Ray dashboard answers at `url` (`node_alive`: and the head's node is up, which
    registers after the dashboard answers; jobs need it)."""
    import requests

    try:
        if "ray_version" not in requests.get(f"{url}/api/version", timeout=2.0).json():
            return False
        if not node_alive:
            return True
        nodes = requests.get(f"{url}/api/v0/nodes?detail=1", timeout=2.0).json()
        return any(n.get("state") == "ALIVE" for n in nodes["data"]["result"]["result"])
    except Exception:  # noqa: BLE001 - anything but a Ray answer means "not (yet) a Ray head"
        return False


def _group_members(pgid: int) -> list[bytes]:
    """Command lines of the processes in process group `pgid` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                out.append((stat.parent / "cmdline").read_bytes())
        except (OSError, IndexError, ValueError):
            continue  # the process ended while being read
    return out


@dataclass
class LocalHead:
    """A Ray head on this machine, with its dashboard (the Jobs API) on 127.0.0.1 only."""

    dashboard_url: str
    port: int
    pgid: int | None
    """Process group of every Ray process of this head (`ray start` ran in its own session)."""
    started: bool
    """False when an already running head was reused (its jobs are still there)."""
    log_path: Path | None = None
    metrics_port: int | None = None
    """Where this head exports Ray's Prometheus metrics (rlkit's gauges among them)."""

    def describe(self) -> str:
        verb = "started" if self.started else "reusing"
        return f"{verb} local Ray head at {self.dashboard_url}"

    def _gone_within(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _group_members(self.pgid):
                return True
            time.sleep(0.2)
        return False

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop this head and its jobs (SIGTERM, then SIGKILL after `timeout_s`); other Ray
        instances on the machine are left alone, and a run resumes from its last checkpoint."""
        # a recycled id is not ours: the group must still hold Ray processes
        if self.pgid is None or not any(b"ray" in cmd for cmd in _group_members(self.pgid)):
            raise RlkitError(
                f"the head at {self.dashboard_url} was not started by rlkit or is already down; "
                "stop a foreign head with `ray stop`"
            )
        # SIGTERM to the whole group: each Ray process shuts itself down, in parallel.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGTERM)
        if not self._gone_within(timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
            self._gone_within(10.0)
        _state_file(self.port).unlink(missing_ok=True)


@contextlib.contextmanager
def _start_lock(port: int, timeout_s: float) -> Iterator[None]:
    """One start per port at a time, across processes: a second `connect()` waits for the start
    under way and reuses its head (filelock's flock, released however its holder exits)."""
    path = _state_file(port).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock = FileLock(path).acquire(timeout=timeout_s, poll_interval=0.2)
    except Timeout:
        raise RlkitError(
            f"another process has been starting the local Ray head on 127.0.0.1:{port} "
            f"for over {timeout_s:.0f} s; see {_state_file(port).with_suffix('.log')} "
            "or pass connect(local_port=...) a free port"
        ) from None
    with lock:
        yield


def start_local_head(
    port: int = DEFAULT_DASHBOARD_PORT,
    *,
    num_cpus: int | None = None,
    timeout_s: float = LOCAL_HEAD_START_TIMEOUT_S,
) -> LocalHead:
    """Reuse the Ray head on 127.0.0.1:`port`, or start one there (`num_cpus` for jobs, default
    this machine's, plus `LOGICAL_GPUS` with a CPU each), waiting for a start under way."""
    with _start_lock(port, timeout_s):
        running = find_local_head(port)
        if running is not None:
            return running
        return _start(port, num_cpus, timeout_s)


def find_local_head(port: int = DEFAULT_DASHBOARD_PORT) -> LocalHead | None:
    """The Ray head answering on 127.0.0.1:`port`, reused as it is; None when none answers."""
    url = f"http://127.0.0.1:{port}"
    if not _dashboard_answers(url):
        return None
    state = _state_file(port)
    known = json.loads(state.read_text()) if state.exists() else {}
    return LocalHead(
        url, port, known.get("pgid"), started=False, metrics_port=known.get("metrics_port")
    )


def _start(port: int, num_cpus: int | None, timeout_s: float) -> LocalHead:
    url = f"http://127.0.0.1:{port}"
    state = _state_file(port)
    if _port_taken(port):
        raise RlkitError(
            f"127.0.0.1:{port} is taken by something that is not a Ray dashboard; "
            "pass connect(local_port=...) a free port"
        )
    ray_cli = Path(sys.executable).parent / "ray"
    if os.environ.get(LEAN_ENV) == "1":
        cmd = [sys.executable, "-c", _RAY_START]
    else:
        cmd = [str(ray_cli) if ray_cli.exists() else "ray"]
    cmd += [
        *("start", "--head", "--disable-usage-stats"),
        *("--include-dashboard", "true", "--dashboard-host", "127.0.0.1"),
        *("--dashboard-port", str(port), "--port", str(free_port())),
        # free ports everywhere: Ray's fixed defaults collide with another head's (decisions.md)
        *("--ray-client-server-port", str(free_port())),
        *("--dashboard-agent-listen-port", str(free_port())),
        *("--min-worker-port", "0", "--max-worker-port", "0"),
        *("--object-store-memory", str(512 * 2**20)),
        *("--metrics-export-port", str(metrics_port := free_port())),
        *("--temp-dir", str(ray_temp_dir(port))),
        *("--num-gpus", str(LOGICAL_GPUS)),
        *("--resources", json.dumps({"accelerator_type:logical": 1})),  # the summary's GPU type
    ]
    cmd += ["--num-cpus", str((num_cpus or os.cpu_count() or 1) + LOGICAL_GPUS)]
    # without RAY_ADDRESS & co.: Ray would point the head at the cluster they name
    env = {k: v for k, v in os.environ.items() if k not in ADDRESS_ENV_VARS}
    env.update(
        IDLE_ENV,
        RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT=str(timeout_s),
        RAY_DASHBOARD_STARTUP_TIMEOUT_S=str(int(timeout_s)),
        RAY_raylet_start_wait_time_s=str(int(timeout_s)),  # Ray's 30 s fail on busy cores
        RAY_agent_register_timeout_ms=str(int(timeout_s * 1000)),
        # Job entrypoints say `python`: make that this interpreter, which has rlkit's deps.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    state.parent.mkdir(parents=True, exist_ok=True)
    log_path = state.with_suffix(".log")
    deadline = time.monotonic() + timeout_s
    for attempt in (1, 2):  # a `ray start` that died early on a busy machine: one more try
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        head = LocalHead(
            url, port, proc.pid, started=True, log_path=log_path, metrics_port=metrics_port
        )
        # `ray start` returns once the head runs; its processes stay in the group it leads.
        while not _dashboard_answers(url, node_alive=True):
            failed = proc.poll() not in (None, 0)
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        else:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of this head did start
        proc.wait()
        if attempt == 2 or time.monotonic() > deadline:
            raise RlkitError(
                f"the local Ray head on 127.0.0.1:{port} did not come up within {timeout_s:.0f} s; "
                f"see {log_path} (an overloaded machine is the usual cause)"
            )
    proc.wait()  # `ray start` itself has finished by now; reap it
    state.write_text(json.dumps({"pgid": proc.pid, "url": url, "metrics_port": metrics_port}))
    return head
