"""Fault injection at named points of the trainer, for crash-and-resume tests.

The trainer calls `point(name, step)` where a crash is most harmful: `rollout` (episodes
sampled, nothing applied yet), `optimizer` (gradients computed, weights partly updated) and
`checkpoint` (the policy written into the unfinished checkpoint, the trainer state not yet).
Unless RLKIT_FAULT is set, `point` returns at once. RLKIT_FAULT holds `NAME@STEP:ACTION`:

    RLKIT_FAULT=optimizer@6:kill        SIGKILL this process at its first `optimizer` of step 6
    RLKIT_FAULT=checkpoint@6:pause=60   print a line to stderr, then sleep 60 s (a test kills it)

The pause line is `rlkit-fault: paused at NAME@STEP pid PID`, so a test (or a Ray job's log)
knows the process is inside the point before it sends the signal.
"""

from __future__ import annotations

import os
import signal
import sys
import time

ENV_VAR = "RLKIT_FAULT"
POINTS = ("rollout", "optimizer", "checkpoint")


def parse(spec: str) -> tuple[str, int, str, float]:
    """`NAME@STEP:ACTION` -> (name, step, action, pause seconds); ValueError names the fix."""
    where, _, action = spec.partition(":")
    name, _, step = where.partition("@")
    kind, _, seconds = action.partition("=")
    if name not in POINTS or not step.isdigit() or kind not in ("kill", "pause"):
        raise ValueError(
            f"{ENV_VAR}={spec!r}: write NAME@STEP:kill or NAME@STEP:pause=SECONDS "
            f"with NAME one of {', '.join(POINTS)}"
        )
    return name, int(step), kind, float(seconds or 0)


def point(name: str, step: int) -> None:
    """Crash or stall here if RLKIT_FAULT names this point and step; otherwise do nothing."""
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    want, at, action, seconds = parse(spec)
    if (want, at) != (name, step):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"rlkit-fault: paused at {name}@{step} pid {os.getpid()}", file=sys.stderr, flush=True)
    time.sleep(seconds)
