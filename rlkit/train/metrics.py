"""Training metrics at the edges: JSONL always, TensorBoard if installed, Ray gauges under Ray.

Metric names are grouped by prefix: `rollout/` (episodes just sampled: reward_mean, solve_rate,
turns), `loss/` (grpo.policy_loss metrics), `eval/` (held-out test set), `timing/` (seconds per
phase, from `timer`) and `train/` (lr, episodes seen, phase). One `log(step, metrics)` call per
step writes one line to RUN/metrics.jsonl (via RunDir: flushed and fsynced), the numeric values
to TensorBoard event files under RUN/tensorboard, and a few gauges to Ray.

Ray gauges (`ray.util.metrics.Gauge`, tag `run` = the run directory's name) exist when the process
is connected to Ray: `ray.is_initialized()`, or a Ray job's driver (RAY_ADDRESS holds a GCS
address, RAY_JOB_ID is set), in which case the logger calls `ray.init()` to connect. Ray exports
them to Prometheus with a `ray_` prefix, which is what a HyperPod Grafana dashboard queries:

    rlkit_train_step            -> ray_rlkit_train_step             (every log call)
    rlkit_reward_mean           -> ray_rlkit_reward_mean            (rollout/reward_mean)
    rlkit_solve_rate{split}     -> ray_rlkit_solve_rate             (rollout/ or eval/solve_rate)
    rlkit_last_checkpoint_step  -> ray_rlkit_last_checkpoint_step   (log_checkpoint)

`NullLogger` has the same methods and does nothing, for runs with tracking off.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from rlkit.errors import UsageError
from rlkit.train.runs import RunDir

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
    """Refuse metric names outside the prefix groups, so dashboards and plots can find them."""
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


class Logger(Protocol):
    """What the trainer calls; MetricsLogger and NullLogger both provide it."""

    def log(self, step: int, metrics: Mapping[str, MetricValue]) -> dict[str, Any]: ...

    def log_checkpoint(self, step: int) -> None: ...

    def timer(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    def close(self) -> None: ...


class MetricsLogger:
    """Writes each step's metrics to JSONL, TensorBoard and Ray gauges.

    tensorboard: write event files when `torch.utils.tensorboard` imports. ray_gauges: None
    detects Ray (`ray_connected`), False never touches Ray. resume_step: the checkpoint step a
    resumed run restarts from; TensorBoard events after it are purged, as metrics.jsonl is.
    """

    def __init__(
        self,
        run: RunDir,
        *,
        tensorboard: bool = True,
        ray_gauges: bool | None = None,
        resume_step: int | None = None,
    ):
        self.run = run
        self._pending: dict[str, float] = {}
        self._writer: Any = None
        self.gauges: dict[str, Any] = {}
        if tensorboard:
            self._writer = self._open_tensorboard(run.path / "tensorboard", resume_step)
        if ray_gauges or (ray_gauges is None and ray_connected()):
            self.gauges = self._make_gauges(run.path.resolve().name)

    @staticmethod
    def _open_tensorboard(path: Path, resume_step: int | None) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            _log.info("TensorBoard off (%s): metrics go to metrics.jsonl only", e)
            return None
        purge = resume_step + 1 if resume_step is not None else None
        return SummaryWriter(log_dir=str(path), purge_step=purge, flush_secs=10)

    @staticmethod
    def _make_gauges(run_name: str) -> dict[str, Any]:
        from ray.util.metrics import Gauge

        gauges = {}
        for name, (description, sources) in GAUGES.items():
            tag_keys = ("run", *sorted({k for _, tags in sources for k in tags}))
            gauge = Gauge(name, description=description, tag_keys=tag_keys)
            gauges[name] = gauge.set_default_tags({"run": run_name})
        return gauges

    @property
    def tensorboard_on(self) -> bool:
        return self._writer is not None

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

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullLogger:
    """The logger for tracking off: same methods, writes nothing, times nothing."""

    tensorboard_on = False

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
