"""Notebook-level steps of the workbench: what notebooks 00-05 call between the library modules.

Each function is one step a notebook cell takes (evaluate the baselines once and cache them,
score every checkpoint of a run, pick the mazes worth replaying), so
the notebooks stay a few lines per cell and every step is tested here.

    base = workbench.baseline_evals("runs/demo", "local-tiny", samples=4)
    run = workbench.run_source("runs/demo", "local-tiny", run_dir=None)  # or a SkyRL run dir
    evals = workbench.checkpoint_evals(run)
    fig = plots.solve_rate_curve(evals, baseline=base[report.BASE])

The report on top of these steps (table, paired test, summary.json) is `rlkit.notebook.report`.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from matplotlib.figure import Figure

from rlkit.cluster.skyrl.readers import (
    find_skyrl_run,
    is_skyrl_run,
    read_eval_dump,
    read_eval_dumps,
)
from rlkit.episodes.evaluate import EVAL_SEED, EvalResult, evaluate
from rlkit.episodes.failures import KINDS, classify
from rlkit.episodes.policies import Policy, scripted_policy
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_set_hash
from rlkit.notebook.paths import home_path
from rlkit.notebook.plots import figure_png, load_run_evals
from rlkit.notebook.report import BASE
from rlkit.train.config import TaskConfig, TrainConfig
from rlkit.train.config import preset as train_preset
from rlkit.train.runs import RunDir, checkpoint_problem

SCRIPTED_BASELINES = ("random", "eps-oracle:0.25", "oracle")
"""The floor, a noisy planner and the ceiling: a trained model should land between them."""
PACKAGES = ("torch", "transformers", "ray", "ipywidgets", "papermill", "rlkit")
CLUSTER_VERSIONS = {"python": "3.12", "torch": "2.13.0", "transformers": "5.16.1", "ray": "2.57.0"}
"""What the cluster runs (requirements/cluster-pins.txt; a test keeps the two equal): a kernel
on other versions may build inputs or configs the cluster reads differently."""


# the kernel


def kernel_report() -> dict[str, str]:
    """Python, interpreter and package versions of this kernel; problems under `problems`."""
    report = {"python": platform.python_version(), "executable": sys.executable}
    for name in PACKAGES:
        try:
            report[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            report[name] = "missing"
    problems = [f"{n} is not installed in this kernel" for n in PACKAGES if report[n] == "missing"]
    for name, want in CLUSTER_VERSIONS.items():
        have = report[name]
        if have != "missing" and have != want and not have.startswith(want + "."):
            problems.append(
                f"{name} {have} here, the cluster runs {want}: build the kernel from environment.yml"
            )
    report["problems"] = "; ".join(problems) or "none"
    return report


# cached evaluations


def _slug(name: str) -> str:
    return name.replace(":", "_").replace("/", "_")


def evaluate_cached(
    path: str | Path,
    make_policy: Callable[[], Policy],
    *,
    samples: int,
    task: TaskConfig | None = None,
    seed: int = 0,
    label: str | None = None,
    step: int | None = None,
    mode: str = "sampled",
) -> tuple[EvalResult, list[Trajectory]]:
    """Evaluate once and keep the result (JSON + trajectories) at `path`; later calls read it.

    The cache is reused only for the same test set and samples per maze; delete the file to
    force a new evaluation. The policy is built only when an evaluation runs (loading a model
    costs more than reading a cached result).
    """
    task = task or TaskConfig()
    path = Path(path)
    if path.is_file():
        cached = EvalResult.load(path)
        if (
            cached.samples == samples
            and cached.mode == mode
            and cached.test_set_hash == pinned_set_hash(task.eval_set)
            and cached.trajectories
        ):
            return cached, cached.load_trajectories(path)
    result, trajs = evaluate(
        make_policy(),
        set_name=task.eval_set,
        samples=samples,
        seed=seed,
        cfg=task.env,
        history=task.history,
        mode=mode,
        step=step,
    )
    if label is not None:
        result.policy = label
    result.save(path, trajs)
    return result, trajs


def base_model(preset: str, out_dir: str | Path) -> Path:
    """The untrained model a local run of `preset` starts from (same seed and shape), built once."""
    cfg = train_preset(preset)
    path = Path(out_dir) / f"base_model-{preset}"
    if not (path / "config.json").exists():
        from rlkit.model.build import build_tiny

        build_tiny(path, seed=cfg.schedule.seed, config=cfg.model.tiny)
    return path


def _model_policy(model_dir: Path, cfg: TrainConfig, *, greedy: bool = False) -> Policy:
    from rlkit.model.policy import load_policy

    m = cfg.model
    return load_policy(
        model_dir, temperature=m.temperature, greedy=greedy, constrained=m.constrained
    )


def baseline_evals(
    out_dir: str | Path,
    preset: str,
    *,
    samples: int,
    policies: tuple[str, ...] = (*SCRIPTED_BASELINES, BASE),
) -> dict[str, EvalResult]:
    """Scripted policies and the untrained model (`base`) on the test set, cached under
    OUT/baselines/; the env and test set are those of the training preset."""
    cfg = train_preset(preset)
    root = Path(out_dir) / "baselines"
    results = {}
    for name in policies:
        if name == BASE:
            model_dir = base_model(preset, out_dir)
            make: Callable[[], Policy] = lambda d=model_dir: _model_policy(d, cfg)  # noqa: E731
        else:
            make = lambda n=name: scripted_policy(n)  # noqa: E731
        results[name], _ = evaluate_cached(
            root / f"{_slug(name)}.json", make, samples=samples, task=cfg.task, label=name
        )
    return results


def cached_baselines(out_dir: str | Path) -> dict[str, EvalResult]:
    """Whatever `baseline_evals` cached under OUT/baselines/ (notebook 02), {} if nothing yet."""
    root = Path(out_dir) / "baselines"
    names = (*SCRIPTED_BASELINES, BASE)
    return {n: EvalResult.load(p) for n in names if (p := root / f"{_slug(n)}.json").is_file()}


def run_baselines(
    out_dir: str | Path, source: str | Path, evals: dict[int, EvalResult]
) -> dict[str, EvalResult]:
    """The baselines cached under OUT/baselines/ that can stand beside a run's evals: those on
    the same test set and mazes. A SkyRL run gets no `base`: the local preset's untrained model
    is not the model SkyRL started from (that one is its step-0 eval, `eval_before_train`)."""
    if not evals:
        return {}
    ref = evals[max(evals)]
    same = {
        name: r
        for name, r in cached_baselines(out_dir).items()
        if r.test_set_hash == ref.test_set_hash and r.n_mazes == ref.n_mazes
    }
    if is_skyrl_run(source):
        same.pop(BASE, None)
    return same


def baseline_trajectories(out_dir: str | Path, name: str) -> list[Trajectory]:
    """The episodes `baseline_evals` recorded for one baseline."""
    path = Path(out_dir) / "baselines" / f"{_slug(name)}.json"
    return EvalResult.load(path).load_trajectories(path)


# checkpoints of a run


def _run_config(run: RunDir) -> TrainConfig:
    """The preset the run was trained with; refuses runs whose task was overridden (their
    checkpoints would be scored on a different env than their own evals)."""
    info = run.read_info()
    cfg = train_preset(info["preset"])
    saved = info.get("config", {}).get("task")
    if saved is not None and json.loads(json.dumps(asdict(cfg.task), default=str)) != saved:
        raise UsageError(
            f"{run.path} was trained with task overrides: score it with `rlkit eval` on each "
            "checkpoint, using the same --set values"
        )
    return cfg


def run_source(
    out_dir: str | Path,
    preset: str,
    *,
    run_name: str | None = None,
    run_dir: str | Path | None = None,
    skyrl_export: str | Path | None = None,
) -> Path:
    """The run a notebook reads: `run_dir` (a local run dir, a SkyRL run dir as `rlkit submit`
    printed it, or a SkyRL export dir) or `skyrl_export`; without either, the local run of
    `preset` under OUT that notebook 03 trains. A SkyRL export dir inside its run dir comes
    back as the run dir (the metrics beside the dumps). Relative paths mean the project root."""
    if run_dir and skyrl_export:
        raise UsageError(f"run_dir ({run_dir}) and skyrl_export ({skyrl_export}): give one")
    given = run_dir or skyrl_export
    if not given:
        from rlkit.cluster.launch import plan_training  # imports Ray: only when planning

        return Path(plan_training(preset, home_path(out_dir), run_name=run_name).run_dir)
    path = home_path(given)
    sky = find_skyrl_run(path)
    return sky.run_dir or sky.export_dir if sky is not None else path


def checkpoint_evals(source: str | Path, *, progress: bool = False) -> dict[int, EvalResult]:
    """`{step: EvalResult}` for every checkpoint of a run, ascending.

    A local run dir: the trainer's own evals, plus every complete checkpoint that has none yet,
    scored now with the run's eval settings (seed, samples, sampling) and cached in RUN/evals/.
    A SkyRL run (its run dir or export dir, `find_skyrl_run`): its eval dumps, read as they are.
    """
    sky = find_skyrl_run(source)
    if sky is not None:
        return read_eval_dumps(sky.export_dir, policy=sky.name)
    run = RunDir(source)
    if not run.run_json.exists():
        raise UsageError(
            f"{source} is neither a run dir (run.json) nor a SkyRL run dir or export dir"
        )
    evaluated, marker = set(run.eval_steps()), run.marker_step()
    # Only committed, verified checkpoints: a half-written one would score garbage.
    missing = [
        step
        for step in run.checkpoint_steps()
        if step not in evaluated
        and marker is not None
        and step <= marker
        and checkpoint_problem(run.checkpoint_dir(step), hashes=False) is None
    ]
    if missing:
        cfg = _run_config(run)
        sched = cfg.schedule
        for step in missing:
            policy_dir = run.checkpoint_dir(step) / "policy"
            evaluate_cached(
                run.eval_path(step),
                lambda d=policy_dir: _model_policy(d, cfg, greedy=sched.eval_greedy),
                samples=sched.eval_samples,
                task=cfg.task,
                seed=EVAL_SEED,
                label=f"{run.path.name}@{step}",
                step=step,
            )
    return load_run_evals(run.path)


def final_greedy_eval(source: str | Path) -> EvalResult | None:
    """A local run's last checkpoint played greedily (argmax, one episode per test maze): the
    deterministic policy's solve rate beside the sampled evals. Cached in
    RUN/evals/greedy/global_step_N.json. None for a SkyRL run (its evals are SkyRL's)."""
    if is_skyrl_run(source):
        return None
    run = RunDir(source)
    ckpt = run.latest_complete_checkpoint(hashes=False) if run.run_json.exists() else None
    if ckpt is None:
        raise UsageError(f"{source} holds no complete checkpoint yet: train first (notebook 03)")
    cfg = _run_config(run)
    result, _ = evaluate_cached(
        run.evals_dir / "greedy" / f"global_step_{ckpt.step}.json",
        lambda: _model_policy(ckpt.path / "policy", cfg, greedy=True),
        samples=1,
        task=cfg.task,
        seed=EVAL_SEED,
        label=f"{run.path.name}@{ckpt.step} greedy",
        step=ckpt.step,
        mode="greedy",
    )
    return result


# episodes worth looking at


def diff_maze(a: EvalResult, b: EvalResult) -> int:
    """A maze index worth replaying side by side: A failed and B solved (first sample), else one
    where they differ, else maze 0."""
    if a.test_set_hash != b.test_set_hash:
        raise UsageError("the two results are on different test sets: compare like with like")
    pairs = [(x["solved"][0], y["solved"][0]) for x, y in zip(a.per_maze, b.per_maze, strict=True)]
    for wanted in ((False, True), (True, False)):
        if wanted in pairs:
            return pairs.index(wanted)
    return 0


def episode(trajs: list[Trajectory], result: EvalResult, maze: int, sample: int = 0) -> Trajectory:
    """Episode (maze, sample) of an eval's trajectories (stored maze-major)."""
    if not 0 <= maze < result.n_mazes or not 0 <= sample < result.samples:
        raise UsageError(
            f"maze {maze}, sample {sample}: choose maze < {result.n_mazes}, "
            f"sample < {result.samples}"
        )
    return trajs[maze * result.samples + sample]


def failure_examples(trajs: list[Trajectory]) -> dict[str, Trajectory]:
    """The first failed episode of each failure kind, in the taxonomy's order."""
    found: dict[str, Trajectory] = {}
    for t in trajs:
        kind = classify(t)
        if kind is not None and kind not in found:
            found[kind] = t
    return {k: found[k] for k in (*KINDS, *sorted(set(found) - set(KINDS))) if k in found}


def eval_trajectories(source: str | Path, step: int) -> list[Trajectory]:
    """The episodes the eval of `step` played, in its EvalResult's order (`episode` picks one):
    a local run's recorded trajectories, or a SkyRL run's dumped episodes replayed."""
    sky = find_skyrl_run(source)
    if sky is not None:
        return read_eval_dump(sky.export_dir, step).trajectories(sky.name)
    path = RunDir(source).eval_path(step)
    return EvalResult.load(path).load_trajectories(path)


def save_png(fig: Figure, out_dir: str | Path, name: str) -> Path:
    """Write a figure to OUT/plots/NAME.png (the demo's picture folder); returns the path."""
    path = Path(out_dir) / "plots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(figure_png(fig))
    return path
