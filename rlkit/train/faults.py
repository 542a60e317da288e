"""Fault injection for crash-and-resume tests: `point(name, step)` returns at once unless
RLKIT_FAULT names that point and step (`optimizer@6:kill`, `checkpoint@6:pause=60`; the points,
actions and pause line: docs/local-trainer.md#fault-injection-trainfaultspy)."""

from __future__ import annotations

import os
import signal
import sys
import time

ENV_VAR = "RLKIT_FAULT"
STATE_VAR = "RLKIT_FAULT_STATE"
POINTS = ("rollout", "optimizer", "checkpoint")
ACTIONS = ("kill", "pause")


def parse(spec: str) -> tuple[str, int, str, float]:
    """`NAME@STEP:ACTION` -> (name, step, action, pause seconds); ValueError names the fix."""
    where, _, action = spec.partition(":")
    name, _, step = where.partition("@")
    kind, _, seconds = action.partition("=")
    if name not in POINTS or not step.isdigit() or kind.removeprefix("once-") not in ACTIONS:
        raise ValueError(
            f"{ENV_VAR}={spec!r}: write NAME@STEP:kill or NAME@STEP:pause=SECONDS "
            f"(once-kill, once-pause=S to fire once) with NAME one of {', '.join(POINTS)}"
        )
    return name, int(step), kind, float(seconds or 0)


def _fired_before(name: str, step: int) -> bool:
    """For a once- fault: whether any process fired it already (else record that this one does)."""
    state = os.environ.get(STATE_VAR)
    if not state:
        raise ValueError(f"{ENV_VAR} has a once- fault but {STATE_VAR} names no directory")
    os.makedirs(state, exist_ok=True)
    try:
        os.close(os.open(os.path.join(state, f"{name}@{step}"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return True
    return False


def point(name: str, step: int) -> None:
    """Crash or stall here if RLKIT_FAULT names this point and step; otherwise do nothing."""
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    for one in spec.split(","):
        want, at, action, seconds = parse(one)
        if (want, at) != (name, step):
            continue
        if action.startswith("once-") and _fired_before(name, step):
            return
        if action.removeprefix("once-") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        print(
            f"rlkit-fault: paused at {name}@{step} pid {os.getpid()}", file=sys.stderr, flush=True
        )
        time.sleep(seconds)
        return
