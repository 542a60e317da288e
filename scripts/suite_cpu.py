"""Where the suite's CPU goes: run a command, sample every process's CPU time once a second from
/proc, then print core-seconds by kind of process (pytest's own workers, Ray's head daemons,
Ray actors and tasks, vLLM engine cores, job drivers, kernels, ...) and the busiest processes.

    python scripts/suite_cpu.py [--json OUT] -- make test

On a CPU-bound machine the wall time is the CPU work over the cores, so this says which work
to cut. Linux only (/proc). A process seen for under a second is missed; the last line compares
what the samples cover with the machine's busy time over the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
KINDS = (  # (kind, substrings of "comm | cmdline"), first match wins; paths under
    # /tmp/pytest-of-USER name no kind, so a test's subprocess is counted as what it runs
    (
        "pytest and its workers (tests in-process)",
        ("pytest-xdist", "exec(eval(sys.stdin", "-m pytest", "bin/pytest"),
    ),
    ("vLLM engine processes", ("VLLM::", "EngineCore")),
    ("SkyRL job drivers", ("rlkit.cluster.skyrl.entry",)),
    (
        "Ray head daemons",
        (
            "gcs_server",
            "raylet |",
            "dashboard.py",
            "dashboard/agent.py",
            "log_monitor",
            "monitor.py",
            "ray.util.client.server",
            "runtime_env/agent",
            "ray-dashboard-",
            "ray start",
            "ray::DashboardAgent",
        ),
    ),
    ("Ray actors and tasks", ("ray::", "default_worker.py", "setup_worker.py")),
    ("vLLM API servers", ("vllm.entrypoints",)),
    ("Jupyter kernels and servers", ("ipykernel", "jupyter")),
    ("Chromium", ("chrom",)),
    ("rlkit CLI subprocesses", ("rlkit.cli.main", "from rlkit")),
    ("other Python", ("python",)),
)


def kind_of(label: str) -> str:
    for kind, needles in KINDS:
        if any(n in label for n in needles):
            return kind
    return "other"


def _read(pid: str) -> tuple[str, float] | None:
    """(start-time key, CPU seconds) of one process, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return f"{pid}:{fields[19]}", (int(fields[11]) + int(fields[12])) / TICK


def _label(pid: str) -> str | None:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return None
    return f"{comm} | {cmd[:300]}"


def _busy_s() -> float:
    parts = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    values = [int(v) for v in parts]
    return (sum(values) - values[3] - values[4]) / TICK  # minus idle and iowait


class Sampler:
    """Per process: CPU when first seen (0 if born during the run), CPU when last seen, and its
    latest title (Ray workers and vLLM's engine cores retitle themselves once they run)."""

    def __init__(self) -> None:
        self.procs: dict[str, list] = {}
        self.stop = threading.Event()

    def sample(self, first: bool = False) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            read = _read(pid)
            label = _label(pid) if read else None
            if label is None:
                continue
            key, cpu = read
            entry = self.procs.setdefault(key, [cpu if first else 0.0, cpu, label])
            entry[1] = cpu  # a process born during the run counts all its CPU
            # spawned processes retitle themselves once they run; an exiting one reads empty
            if "IDLE" not in label and not label.endswith("| "):
                entry[2] = label

    def run(self) -> None:
        self.sample(first=True)
        while not self.stop.wait(1.0):
            self.sample()


def report(procs: dict[str, list], wall_s: float, busy_s: float, top: int) -> list[str]:
    used = {k: (last - first, label) for k, (first, last, label) in procs.items()}
    by_kind: Counter = Counter()
    counts: Counter = Counter()
    for seconds, label in used.values():
        kind = kind_of(label)
        by_kind[kind] += seconds
        counts[kind] += seconds > 0
    total = sum(by_kind.values()) or 1e-9
    lines = [f"{'core-s':>8} {'share':>6} {'procs':>6}  kind"]
    for kind, seconds in by_kind.most_common():
        lines.append(f"{seconds:8.1f} {seconds / total:6.1%} {counts[kind]:6d}  {kind}")
    lines += ["", f"busiest {top} processes (core-s, kind, what)"]
    for seconds, label in sorted(used.values(), reverse=True)[:top]:
        lines.append(f"{seconds:8.1f}  {kind_of(label)}: {label[:140]}")
    cover = f"{total / busy_s:.0%}" if busy_s else "-"
    lines += [
        "",
        f"wall {wall_s:.0f} s; {total:.0f} core-s sampled, the machine was busy {busy_s:.0f} "
        f"core-s ({cover} covered); {os.cpu_count()} cores",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write every process's CPU here")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --, e.g. -- make test")
    if not Path("/proc/stat").exists():
        parser.error("this needs Linux's /proc")
    sampler = Sampler()
    thread = threading.Thread(target=sampler.run, daemon=True)
    busy0, t0 = _busy_s(), time.monotonic()
    thread.start()
    code = subprocess.call(command)
    sampler.stop.set()
    thread.join()
    wall, busy = time.monotonic() - t0, _busy_s() - busy0
    print("\n".join(report(sampler.procs, wall, busy, args.top)))
    if args.json:
        args.json.write_text(json.dumps(sampler.procs))
    return code


if __name__ == "__main__":
    sys.exit(main())
