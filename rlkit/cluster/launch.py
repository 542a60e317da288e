"""Training as a Ray job, one path for every preset: `plan_training` resolves a preset into a
`TrainingPlan`, `launch_plan` submits it (`rlkit submit`, `rlkit train --address`, notebook 03).

    job = launch_plan(plan_training("local-tiny", "runs", address="local"), connect("local"))"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rlkit.cluster.address import resolve_address
from rlkit.cluster.client import Cluster, connect
from rlkit.cluster.jobs import JobHandle, run_slug
from rlkit.cluster.skyrl import presets as skyrl
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides, entrypoint_command
from rlkit.cluster.skyrl.preset_checks import (
    check_budget,
    check_storage,
    estimate_cost,
    eval_plan,
    start_plan,
    storage_estimate,
)
from rlkit.errors import RlkitError, UsageError
from rlkit.recipe import local_set_args
from rlkit.run import remote
from rlkit.settings import parse_sets
from rlkit.train.presets import PRESETS as LOCAL_PRESETS
from rlkit.train.presets import preset as load_preset

if TYPE_CHECKING:
    from rlkit.model.budget_report import BudgetReport

PRESETS = dict.fromkeys(LOCAL_PRESETS, "local") | dict.fromkeys(skyrl.PRESETS, "skyrl")
"""Every preset name -> its backend: `local` (`rlkit.train.presets`) or `skyrl` (`.skyrl.presets`)."""


def preset_backend(name: str) -> str:
    """`local` or `skyrl` (`PRESETS`); an unknown name is a one-line UsageError naming all."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[name]


def training_entrypoint(
    preset: str, run_dir: str | Path, *, resume: str = "latest", overrides: Sequence[str] = ()
) -> str:
    """The shell command the job runs (validated here, before anything is submitted)."""
    if preset not in LOCAL_PRESETS:
        load_preset(preset)  # its one-line error now, not minutes later on the cluster
    parts = ["python", "-m", "rlkit.cli.main", "train", "--preset", preset]
    parts += ["--run-dir", str(run_dir), "--resume", resume]
    for key, value in parse_sets(overrides).items():
        parts += ["--set", f"{key}={value}"]
    return shlex.join(parts)


def submit_training(
    preset: str,
    run_dir: str | Path,
    *,
    address: str | Cluster | None = None,
    resume: str = "latest",
    overrides: Sequence[str] = (),
    follow: bool = False,
) -> JobHandle | None:
    """Submit a local-backend run as a Ray job named after its run directory (`rlkit train
    --address`); `follow` prints its log until it ends."""
    run_path = Path(run_dir).resolve()  # the job's working directory is a shipped copy
    plan = plan_training(
        preset, run_path.parent, run_name=run_path.name, overrides=overrides, resume=resume
    )
    if plan.run_dir != str(run_path):
        raise UsageError(
            f"run dir {run_path.name!r}: a run as a Ray job takes its name (letters, digits, "
            "'-', '_', '.')"
        )
    cluster = address if isinstance(address, Cluster) else connect(address)
    return launch_plan(plan, cluster, follow=follow)  # a local preset is never a dry run


def submit_eval(
    policy: str,
    out: str,
    *,
    address: str | Cluster | None = None,
    set_name: str = "test-large",
    samples: int = 4,
    device: str = "cuda",
    gpus: float = 1,
    engine: str = "hf",
    kv_cache_gb: float | None = None,
    follow: bool = False,
) -> JobHandle:
    """Evaluate a checkpoint (e.g. a SkyRL HF export on /fsx) as a Ray job: pass@k, failures and
    trajectories land in `out`; `engine` "vllm" runs vLLM in the job."""
    if samples < 1 or gpus < 0:
        raise UsageError(f"samples ({samples}) must be >= 1 and gpus ({gpus}) >= 0")
    if engine not in ("hf", "vllm"):
        raise UsageError(f"unknown engine {engine!r}: use hf or vllm")
    vllm_args = ["--engine", engine] if engine != "hf" else []
    if kv_cache_gb is not None:
        vllm_args += ["--kv-cache-gb", f"{kv_cache_gb:g}"]
    cluster = address if isinstance(address, Cluster) else connect(address)
    argv = ["python", "-m", "rlkit.cli.main", "eval", "--policy", policy, "--set", set_name]
    argv += ["--samples", str(samples), "--device", device, "--json", "--out", out, *vllm_args]
    handle = cluster.submit(
        f"eval-{Path(policy).name}",
        shlex.join(argv),
        num_gpus=gpus or None,
        metadata={"policy": policy, "out": out, "kind": "eval", "engine": engine},
    )
    if follow:
        remote.follow(handle, _print)
    return handle


_print = functools.partial(print, end="", flush=True)


class Refreshable(Protocol):
    """A live view of a job (e.g. `rlkit.notebook.monitor.JobMonitor`)."""

    def stop_polling(self) -> None: ...

    def refresh(self) -> object: ...


def plan_line(label: str, value: object) -> str:
    """One line of a printed plan: `plan_line("run dir", path)` -> `run dir:       /...`."""
    return f"{label + ':':<15}{value}"


def pod_summary(sky: skyrl.SkyRLPreset) -> str:
    """The preset's worker pods: how many, and each one's GPUs, CPUs, memory and network."""
    pod = sky.pod
    if pod is None:
        return f"{sky.layout.nodes} host(s) with {sky.node_gpus} logical GPUs (no instance type)"
    efa = f", {pod.efa} EFA" if pod.efa else ", no EFA (one node)"
    return (
        f"{sky.layout.nodes} x {sky.layout.instance_type}, each pod {pod.gpus} GPUs, {pod.cpus} vCPU, "
        f"{pod.memory_gib} GiB{efa}"
    )


@dataclass(frozen=True)
class TrainingPlan:
    """What `rlkit submit` and notebook 03 submit; `str(plan)` is its one printed form."""

    preset: str
    run_name: str
    run_dir: str
    command: str
    address: str | None
    """As given (None or `local` is the local head)."""
    sky: skyrl.SkyRLPreset | None = None
    """Set for SkyRL presets."""
    overrides: tuple[str, ...] = ()
    """A local preset's `--set KEY=VALUE` arguments (its command carries them)."""
    budget: BudgetReport | None = None
    """A SkyRL preset's token budget (checked)."""
    recipe: Mapping[str, object] = field(default_factory=dict)
    """The recipe switches this plan changes from its preset's own."""
    tuning: str = ""
    """Which weights train (`rlkit.model.config.Tuning.describe`)."""

    @property
    def backend(self) -> str:
        return "local" if self.sky is None else "skyrl"

    @property
    def dry_run(self) -> bool:
        """A GPU SkyRL preset aimed at the local head (logical GPUs) is only printed."""
        needs_gpus = self.sky is not None and self.sky.layout.device != "cpu"
        return needs_gpus and resolve_address(self.address).local

    @property
    def driver_cpus(self) -> int | None:
        """CPUs the job's driver reserves (None: Ray's default; 0 on a CPU host, where it waits)."""
        if self.sky is None:
            return None
        return 0 if self.sky.layout.device == "cpu" else 1

    def lines(self) -> list[str]:
        """The plan, one `label: value` line each (SkyRL presets add theirs)."""
        if self.dry_run:
            need = self.sky.num_gpus
            where = f"no cluster: dry run (the preset needs {need} GPUs, the local head has none)"
        else:
            where = str(resolve_address(self.address))
        recipe = ", ".join(f"{k}={v}" for k, v in self.recipe.items()) or "the preset's own"
        lines = [
            plan_line("preset", f"{self.preset} ({self.backend} backend)"),
            plan_line("run dir", self.run_dir),
            plan_line("address", where),
            plan_line("command", self.command),
            plan_line("recipe", recipe),
            plan_line("lora", self.tuning),
        ]
        if not self.dry_run:
            lines.append(plan_line("rlkit", "this checkout, shipped as the job's working dir"))
        if self.sky is not None:
            lines += self._skyrl_lines(self.sky)
        return lines

    def _skyrl_lines(self, sky: skyrl.SkyRLPreset) -> list[str]:
        if sky.layout.device == "cpu":
            task = "SkyRL's trainer task on this host"
            gpus = f"SkyRL asks for {sky.num_gpus} GPUs (the local head's logical ones)"
        else:
            task = f"SkyRL's trainer task {sky.layout.driver_memory_gb} GiB on a GPU worker"
            gpus = f"SkyRL asks for {sky.num_gpus} GPUs"
        lines = [
            plan_line("resources", f"driver {self.driver_cpus} CPU; {task}; {gpus}"),
            plan_line("workers", pod_summary(sky)),
            plan_line("storage", storage_estimate(sky).summary()),
        ]
        if self.budget is not None and sky.layout.device != "cpu":
            lines += estimate_cost(sky, self.budget.budget).lines()
        lines.append(plan_line("start", start_plan(sky)))
        lines.append(plan_line("eval", eval_plan(sky)))
        hang = (
            f"on HyperPod, {sky.hang.action} after {sky.hang.minutes} min without a step line "
            f"({sky.hang.start_minutes} min to the first); off elsewhere"
        )
        lines.append(plan_line("hang rule", hang if sky.hang.enabled else "off (--hang-minutes 0)"))
        if self.budget is not None:
            lines += self.budget.lines()
        lines.append("SkyRL overrides:")
        answer = None if self.budget is None else self.budget.budget.answer
        return lines + [f"  {o}" for o in build_overrides(sky, self.run_name, answer)]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def plan_training(
    preset: str,
    out_dir: str | Path,
    *,
    address: str | None = None,
    run_name: str | None = None,
    skyrl_changes: Mapping[str, object] | None = None,
    overrides: Sequence[str] = (),
    resume: str = "latest",
    recipe: Mapping[str, object] | None = None,
) -> TrainingPlan:
    """Resolve a preset name into a plan: local presets train in OUT/RUN_NAME (`overrides`:
    `rlkit train --set` arguments), SkyRL presets in their runs_root (changed by `skyrl_changes`,
    e.g. {"nodes": 2}); `recipe` switches change either. What cannot be honoured is refused."""
    name = run_slug(run_name or preset)
    recipe = dict(recipe or {})
    sky: skyrl.SkyRLPreset | None = None
    budget: BudgetReport | None = None
    if preset_backend(preset) == "local":
        overrides = (*overrides, *local_set_args(recipe))  # each switch checked by name
        base = load_preset(preset)
        cfg = base.with_overrides(parse_sets(overrides))  # refused here, in one line
        run_dir = str((Path(out_dir) / name).resolve())
        command = training_entrypoint(preset, run_dir, resume=resume, overrides=overrides)
        changes, tuning = cfg.recipe.changes(base.recipe), cfg.model.describe()
    else:
        switches = {f"recipe.{k.removeprefix('recipe.')}": v for k, v in recipe.items()}
        sky = skyrl.get_preset(preset, **{**(skyrl_changes or {}), **switches})
        check_storage(sky)  # a run that would fill /fsx is refused before it starts
        budget = check_budget(sky)  # so is a turn budget that cannot fit its token limits
        run_dir = RunPaths.for_run(sky, name).run_dir
        command = entrypoint_command(sky, name, preset, budget.budget.answer)
        changes, tuning = sky.recipe.changes(skyrl.PRESETS[preset].recipe), sky.model.describe()
        overrides = ()
    return TrainingPlan(
        preset,
        name,
        run_dir,
        command,
        address,
        sky=sky,
        overrides=tuple(overrides),
        budget=budget,
        recipe=changes,
        tuning=tuning,
    )


def launch_plan(
    plan: TrainingPlan,
    cluster: Cluster | None,
    *,
    env_vars: Mapping[str, str] | None = None,
    follow: bool = False,
) -> JobHandle | None:
    """Submit the plan as a Ray job (None for a dry run); `env_vars` reach the job, masked in all
    rlkit prints; `follow` prints its log until it ends. Submitted again, a run resumes."""
    if plan.dry_run:
        return None
    if cluster is None:
        raise UsageError("launch needs a cluster: cluster = connect(address) first")
    sky = plan.sky
    if sky is not None:
        gpus = sum(cluster.summary().gpus.values())
        if gpus < sky.num_gpus:
            raise RlkitError(
                f"{cluster.address} has {gpus:g} GPUs, the preset needs {sky.num_gpus} "
                f"({plan.preset}): scale up the worker group or lower nodes in the preset file"
            )
    handle = cluster.submit(
        plan.run_name,
        plan.command,
        runtime_env_vars=dict(env_vars or {}),
        metadata={"preset": plan.preset, "run_dir": plan.run_dir, "backend": plan.backend},
        num_cpus=plan.driver_cpus,
    )
    if follow:
        remote.follow(handle, _print)
    return handle


def finish(job: JobHandle, monitor: Refreshable | None, timeout_s: float) -> str:
    """Block until the job ends and show it in the monitor; RlkitError unless it succeeded."""
    status = job.wait(timeout_s, poll_s=1.0).value
    if monitor is not None:
        monitor.stop_polling()
        monitor.refresh()
    if status != "SUCCEEDED":
        raise RlkitError(f"job {job.submission_id} ended {status}: {remote.log_tail(job.logs())}")
    return status
