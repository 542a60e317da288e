"""The run logger both backends log through: `log(step, metrics)` writes one fsynced line to
RUN/metrics.jsonl and sets Ray gauges under Ray: docs/decisions.md#metrics-and-ray-gauges."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from rlkit.errors import UsageError
from rlkit.run.rundir import RunDir

_log = logging.getLogger(__name__)

PREFIXES: tuple[str, ...] = ("rollout/", "loss/", "eval/", "timing/", "train/")
MetricValue = float | int | bool | str | None

# gauge name -> (description, [(metric key, tags)])
GAUGES: dict[str, tuple[str, list[tuple[str, dict[str, str]]]]] = {
    "rlkit_train_step": ("Last training step logged", []),
    "rlkit_reward_mean": (
        "Mean episode reward of the latest rollout batch",
        [("rollout/reward_mean", {})],
    ),
    "rlkit_solve_rate": (
        "Fraction of mazes solved (split=train: rollouts, split=eval: held-out test set)",
        [("rollout/solve_rate", {"split": "train"}), ("eval/solve_rate", {"split": "eval"})],
    ),
    "rlkit_last_checkpoint_step": ("Step of the last complete checkpoint", []),
    # the stability signals (rlkit.run.stability), one name on both backends
    "rlkit_policy_entropy": ("Policy's mean token entropy", [("loss/entropy", {})]),
    "rlkit_clip_fraction": (
        "Share of loss tokens where PPO's clip binds",
        [("loss/clip_fraction", {})],
    ),
    "rlkit_grad_norm": ("Policy gradient norm before clipping", [("loss/grad_norm", {})]),
    "rlkit_logprob_gap": (
        "Mean per-token |rollout - trainer| logprob (SkyRL; 0 by construction locally)",
        [("loss/rollout_train_logprobs_abs_diff_mean", {})],
    ),
}


@contextlib.contextmanager
def timer(name: str, into: dict[str, float]) -> Iterator[None]:
    """Add the block's wall time in seconds to `into["timing/<name>"]` (repeats accumulate)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"timing/{name}"
        into[key] = into.get(key, 0.0) + time.perf_counter() - start


def check_names(metrics: Mapping[str, Any]) -> None:
    """Refuse metric names outside the prefix groups."""
    for key in metrics:
        if not key.startswith(PREFIXES) or key in PREFIXES:
            raise UsageError(
                f"metric name {key!r} needs a group prefix and a name: one of "
                f"{', '.join(PREFIXES)} (the step is passed separately)"
            )


def ray_connected() -> bool:
    """Whether this process is (or, as a Ray job's driver, can be) connected to Ray."""
    loaded = sys.modules.get("ray")  # importing ray costs seconds: only when it can matter
    if loaded is not None and loaded.is_initialized():
        return True
    address = os.environ.get("RAY_ADDRESS", "")
    # An http(s) RAY_ADDRESS is the Jobs API of a client, not a cluster this process runs in.
    if not (os.environ.get("RAY_JOB_ID") or address) or address.startswith(("http://", "https://")):
        return False
    try:
        import ray
    except ImportError:
        return False
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.WARNING)
    except Exception as e:  # a broken Ray must not stop training, only its gauges
        _log.warning("Ray gauges off: ray.init(address=%r) failed: %s", address or "auto", e)
        return False
    return True


class RunLogger(contextlib.AbstractContextManager):
    """Writes each step's metrics to RUN/metrics.jsonl, `scalars` (`add_scalar`, `close`: e.g.
    TensorBoard's SummaryWriter) and Ray gauges (`ray_gauges` None: when `ray_connected`)."""

    def __init__(self, run: RunDir, *, scalars: Any = None, ray_gauges: bool | None = None):
        self.run = run
        self._pending: dict[str, float] = {}
        self._writer = scalars
        self.gauges: dict[str, Any] = {}
        if ray_gauges or (ray_gauges is None and ray_connected()):
            self.gauges = self._make_gauges(run.path.resolve().name)

    @staticmethod
    def _make_gauges(run_name: str) -> dict[str, Any]:
        from ray.util.metrics import Gauge

        gauges = {}
        for name, (description, sources) in GAUGES.items():
            tag_keys = ("run", *sorted({k for _, tags in sources for k in tags}))
            gauge = Gauge(name, description=description, tag_keys=tag_keys)
            gauges[name] = gauge.set_default_tags({"run": run_name})
        return gauges

    def timer(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Time a phase; its seconds join the next `log` call as `timing/<name>`."""
        return timer(name, self._pending)

    def log(self, step: int, metrics: Mapping[str, MetricValue]) -> dict[str, Any]:
        """Record one step; returns the record written to metrics.jsonl."""
        check_names(metrics)
        record: dict[str, Any] = {"step": step, **self._pending, **metrics}
        self._pending = {}
        self.run.append_metrics(record)
        numeric = {
            k: float(v)
            for k, v in record.items()
            if k != "step" and isinstance(v, int | float) and math.isfinite(v)
        }
        if self._writer is not None:
            for key, value in numeric.items():
                self._writer.add_scalar(key, value, step)
        if self.gauges:
            self.gauges["rlkit_train_step"].set(step)
            for name, (_, sources) in GAUGES.items():
                for key, tags in sources:
                    if key in numeric:
                        self.gauges[name].set(numeric[key], tags=tags or None)
        return record

    def log_checkpoint(self, step: int) -> None:
        """Report that the checkpoint for `step` is complete."""
        if self._writer is not None:
            self._writer.add_scalar("train/checkpoint_step", step, step)
        if self.gauges:
            self.gauges["rlkit_last_checkpoint_step"].set(step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullLogger:
    """The logger for tracking off: same methods, writes nothing, times nothing."""

    def __init__(self) -> None:
        self.gauges: dict[str, Any] = {}

    def log(self, step: int, metrics: Mapping[str, MetricValue]) -> dict[str, Any]:
        check_names(metrics)
        return {"step": step, **metrics}

    def log_checkpoint(self, step: int) -> None:
        return None

    def timer(self, name: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def close(self) -> None:
        return None

    def __enter__(self) -> NullLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
