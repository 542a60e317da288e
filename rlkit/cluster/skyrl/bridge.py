"""SkyRL's metrics in rlkit's names (`MetricsBridge`): one run dir, dashboard and MLflow view for
both backends: docs/skyrl-integration.md#the-metrics-bridge-bridgepy."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlkit.cluster.hang import step_line
from rlkit.episodes.evaluate import EvalResult
from rlkit.errors import RlkitError
from rlkit.run.metrics import RunLogger
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_dumps import read_eval_dump
from rlkit.run.skyrl_layout import SAMPLED_EVALS, latest_step

_log = logging.getLogger(__name__)

ALIASES = {
    "reward/avg_raw_reward": "rollout/reward_mean",
    "environment/solve_rate": "rollout/solve_rate",
    "environment/turns_mean": "rollout/turns_mean",
    "environment/wall_bumps_mean": "rollout/wall_bumps",
    "environment/revisits_mean": "rollout/revisits",
    "environment/parse_errors_mean": "rollout/parse_errors",
    "eval/all/avg_score": "eval/solve_rate",
    "eval/sampled/all/avg_score": "eval/sampled_solve_rate",  # `eval_protocol=both`
    "policy/policy_loss": "loss/policy",
    "policy/final_loss": "loss/total",
    "policy/policy_kl": "loss/kl",
    "policy/policy_entropy": "loss/entropy",
    "policy/loss_metrics/clip_ratio": "loss/clip_fraction",  # share of tokens PPO's clip binds
    "reward/num_zero_variance_filtered": "rollout/zero_variance_groups",
    "policy/policy_lr": "train/lr",
    "trainer/global_step": "train/global_step",
    "trainer/epoch": "train/epoch",
}
"""SkyRL key -> the local trainer's name for the same measure (older runs': `backends.RENAMED`)."""
GROUPS = {
    "reward/": "rollout/",
    "environment/": "rollout/env_",
    "generate/": "rollout/",
    "policy/": "loss/",
    "trainer/": "train/",
    "timing/": "timing/",
    "eval/": "eval/",
}
"""Every other SkyRL key keeps its name under rlkit's group prefix (rest's '/' -> '_')."""


def rlkit_names(data: Mapping[str, Any]) -> dict[str, float]:
    """SkyRL's logged dict as rlkit metrics: numbers only, renamed into rlkit's groups."""
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        name = ALIASES.get(key)
        if name is None:
            group = next((g for g in GROUPS if key.startswith(g)), None)
            if group is None:
                continue  # nothing rlkit's groups can hold (SkyRL's own logger still has it)
            rest = key[len(group) :].replace("/", "_").replace("@", "_at_")
            name = GROUPS[group] + rest
        out[name] = float(value)
    return out


def eval_interval(
    export_path: str | Path,
    step: int,
    greedy: bool | None = None,
    prefix: str = "eval/",
    first_set: str | None = None,
) -> dict[str, float]:
    """The eval's interval, pass@k and skipped dump lines from SkyRL's dump for `step`, under
    `prefix` (`first_set`) or `prefix + SET_` (each other set); {} when it cannot be read."""
    if not (Path(export_path) / "dumped_evals" / f"global_step_{step}_evals").is_dir():
        return {}
    try:
        dump = read_eval_dump(export_path, step)
        results = dump.results_by_set(greedy=greedy)
    except Exception as e:  # a half-written or odd dump must not stop training, only this number
        _log.warning("no interval for the eval at step %d: %s: %s", step, type(e).__name__, e)
        return {}
    if dump.bad_lines:
        _log.warning(
            "eval at step %d: %d dump lines not JSON, skipped: %s",
            step,
            len(dump.bad_lines),
            ", ".join(dump.bad_lines),
        )
    first = first_set if first_set in results else next(iter(results))
    out = {f"{prefix}bad_records": float(len(dump.bad_lines))}
    for name, result in results.items():
        at = prefix if name == first else f"{prefix}{name}_"
        out |= {at + k: v for k, v in result_metrics(result).items()}
        if len(results) > 1:
            out[at + "solve_rate"] = result.solve_rate
    return out


def result_metrics(result: EvalResult) -> dict[str, float]:
    """One set's eval as metrics: interval (exact, with the count solved, for the seed's
    protocol), mazes, samples, whether it is the seed's protocol, pass@k."""
    seed = result.protocol == "seed" and result.exact_ci95 is not None
    low, high = result.exact_ci95 if seed else result.ci95
    out = {"ci_low": low, "ci_high": high, "mazes": float(result.n_mazes)}
    out |= {"samples": float(result.samples), "seed_protocol": float(seed)}
    if seed:
        out["solved"] = float(sum(result.flat))
    return out | {k.replace("@", "_at_"): float(v) for k, v in result.pass_at_k.items()}


def drop_metrics_after_checkpoint(run: RunDir, *, reevaluates: bool = False) -> None:
    """Cut RUN/metrics.jsonl back to the checkpoint SkyRL resumes from; with `reevaluates`
    (`eval_before_train`) that step's eval values go too, as SkyRL evaluates it again."""
    if not run.metrics_path.is_file():
        return
    try:
        ckpt = latest_step(run.path)
        run.truncate_metrics_after(ckpt if ckpt is not None else -1)
        if reevaluates and ckpt is not None:
            evals = ("eval/", "timing/eval")  # what SkyRL's eval logs, in rlkit's names
            run.rewrite_metrics(
                {k: v for k, v in r.items() if r.get("step") != ckpt or not k.startswith(evals)}
                for r in run.read_metrics()
            )
    except (RlkitError, OSError) as e:  # metrics must never stop a run: at worst steps repeat
        _log.warning(
            "%s kept as it is (steps may repeat after this resume): %s", run.metrics_path, e
        )


class MetricsBridge:
    """Renames SkyRL's step dicts into rlkit's run dir, Ray gauges and (optionally) MLflow."""

    def __init__(
        self,
        run_dir: str | Path,
        export_path: str | Path,
        *,
        mlflow: bool | None = None,
        ray_gauges: bool | None = None,
        run_name: str = "",
        reevaluates: bool = False,
        groups_per_step: int | None = None,
        greedy: bool | None = None,
    ) -> None:
        self.run = RunDir(run_dir)
        self.greedy = greedy
        """Whether SkyRL's own eval is greedy (the seed's protocol when one sample a maze)."""
        try:  # the run's `eval_set` (run.json): the first of several eval sets
            entry = (self.run.read_info().get("config") or {}).get("entry") or {}
        except RlkitError:
            entry = {}
        self.eval_set = (entry.get("task") or {}).get("eval_set")
        self.groups_per_step = groups_per_step
        """Prompts (GRPO groups) a step: the zero-variance share's denominator (`rollout/groups`)."""
        drop_metrics_after_checkpoint(self.run, reevaluates=reevaluates)
        self.export_path = Path(export_path)
        self.logger = RunLogger(self.run, ray_gauges=ray_gauges)
        self.checkpoint: int | None = None
        self.mlflow = None
        if mlflow if mlflow is not None else bool(os.environ.get("MLFLOW_TRACKING_URI")):
            try:
                import mlflow as mlflow_client
            except ImportError:  # metrics must never stop a run: the run dir still has them
                _log.warning(
                    "MLFLOW_TRACKING_URI is set but mlflow is not installed here "
                    "(pip install mlflow-skinny sagemaker-mlflow): metrics go to the run dir "
                    "and Ray only"
                )
                return
            if mlflow_client.active_run() is None:
                mlflow_client.set_experiment("rlkit")
                mlflow_client.start_run(run_name=run_name or self.run.path.name)
            self.mlflow = mlflow_client

    def log(self, data: Mapping[str, Any], step: int) -> dict[str, Any]:
        metrics = rlkit_names(data)
        if "rollout/zero_variance_groups" in metrics and self.groups_per_step:
            metrics["rollout/groups"] = float(self.groups_per_step)
        if "eval/solve_rate" in metrics:
            metrics |= eval_interval(self.export_path, step, self.greedy, first_set=self.eval_set)
        if "eval/sampled_solve_rate" in metrics:
            sampled = self.export_path / SAMPLED_EVALS
            metrics |= eval_interval(
                sampled, step, greedy=False, prefix="eval/sampled_", first_set=self.eval_set
            )
        record = self.logger.log(step, metrics)
        print(step_line(step, metrics), flush=True)  # what HyperPod's hang rule watches
        try:
            ckpt = latest_step(self.run.path)
        except RlkitError as e:
            _log.warning("latest checkpoint unknown: %s", e)
            ckpt = None
        if ckpt is not None and ckpt != self.checkpoint:
            self.checkpoint = ckpt
            self.logger.log_checkpoint(ckpt)
        if self.mlflow is not None:
            self.mlflow.log_metrics(metrics, step=step)
        return record

    def close(self) -> None:
        self.logger.close()
        if self.mlflow is not None:
            self.mlflow.end_run()
            self.mlflow = None
