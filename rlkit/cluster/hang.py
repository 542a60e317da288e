"""Hang detection on HyperPod: SageMaker's log rules watching the step lines rlkit prints (a no-op
off HyperPod). The rules: docs/decisions.md#healing-a-run-watch-hang-rules-rayjob."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rlkit.errors import UsageError

STEP_PREFIX = "rlkit: step"
DONE_LINE = "rlkit: training complete"
STEP_PATTERN = r"rlkit: step \d+"
FATAL_PATTERN = r"CUDA out of memory|OutOfMemoryError|Watchdog caught collective operation timeout"
AGENT_HOST_ENV = "HYPERPOD_JMA_HOST"
ACTIONS = ("notify", "cancel")
_SHOWN = ("rollout/reward_mean", "rollout/solve_rate", "eval/solve_rate")


def step_line(step: int, metrics: Mapping[str, float]) -> str:
    """The progress line of one step, e.g. `rlkit: step 12 rollout/solve_rate=0.41`."""
    shown = " ".join(f"{k}={metrics[k]:.4g}" for k in _SHOWN if k in metrics)
    return f"{STEP_PREFIX} {step} {shown}".rstrip()


@dataclass(frozen=True)
class HangRules:
    """A SkyRL preset's `hang` section: `hang_minutes`, `hang_start_minutes`, `hang_action`."""

    minutes: int = 30
    """No step line for this long is a hang (0: off); longer than the slowest step + eval."""
    start_minutes: int = 60
    """Allowed until the first step line (model download, vLLM start, step-0 eval)."""
    action: str = "notify"
    """On a hang: `notify` (an event) or `cancel` (the job fails and is resubmitted)."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"hang action {self.action!r} is not one of {', '.join(ACTIONS)}")
        if self.minutes < 0 or self.start_minutes < 1:
            raise UsageError(
                f"stall minutes ({self.minutes}) must be >= 0 (0 = off) and start minutes "
                f"({self.start_minutes}) >= 1"
            )

    @property
    def enabled(self) -> bool:
        return self.minutes > 0

    def rules(self) -> list[dict]:
        """The toolkit's rule dicts (RE2 patterns, as its `LogMonitorConfig.rules` takes)."""
        return [
            {
                "name": "rlkit_step_progress",
                "type": "log_pattern",
                "enabled": True,
                "log_pattern": STEP_PATTERN,
                "timeout_minutes": self.minutes,
                "start_timeout_minutes": self.start_minutes,
                "stop_pattern": re.escape(DONE_LINE),
            },
            {
                "name": "rlkit_fatal_error",
                "type": "log_pattern",
                "enabled": True,
                "log_pattern": FATAL_PATTERN,
                "fault_on_match": True,
            },
        ]

    def config(self):
        """The toolkit's `LogMonitorConfig` (ImportError without the sagemaker extra)."""
        from toolkit_for_ray_on_sagemaker_ai.log_monitoring import LogMonitorConfig

        return LogMonitorConfig(
            enabled=self.enabled, rules=self.rules() if self.enabled else [], action=self.action
        )


def start_hang_detection(rules: HangRules, env: Mapping[str, str] = os.environ) -> str:
    """Register `rules` with HyperPod's monitoring agent; one line saying what happened. Call it
    in the process that prints the step lines, after `ray.init`."""
    if not rules.enabled:
        return "hang detection: off (stall minutes 0)"
    try:
        from toolkit_for_ray_on_sagemaker_ai.log_monitoring import SageMakerLogMonitoring
    except ImportError:
        return "hang detection: off (not installed here: pip install 'rlkit[sagemaker]')"
    if not env.get(AGENT_HOST_ENV):
        return f"hang detection: off (not on HyperPod: {AGENT_HOST_ENV} is not set)"
    result = SageMakerLogMonitoring(config=rules.config()).start().result
    status = result.get("status", "unknown")
    detail = result.get("message") or result.get("reason") or ""
    if status == "configured":
        return (
            f"hang detection: on ({rules.action} after {rules.minutes} min without "
            f"'{STEP_PREFIX} N', {rules.start_minutes} min to the first step)"
        )
    return f"hang detection: {status}{': ' + detail if detail else ''}"
