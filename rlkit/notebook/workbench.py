"""Notebook-level steps of the workbench: what notebooks 00-05 call between the library modules.

Each function is one step a notebook cell takes (evaluate the baselines once and cache them,
score every checkpoint of a run, pick the mazes worth replaying, write the demo's summary), so
the notebooks stay a few lines per cell and every step is tested here.

    base = workbench.baseline_evals("runs/demo", "local-tiny", samples=4)
    evals = workbench.checkpoint_evals("runs/demo/local-tiny")      # or a SkyRL export dir
    print(workbench.solve_rate_table({**base, **workbench.milestones(evals, 4)}))
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from matplotlib.figure import Figure

from rlkit.cluster.skyrl import readers as skyrl_readers
from rlkit.episodes.evaluate import EvalResult, compare, evaluate
from rlkit.episodes.failures import KINDS, classify
from rlkit.episodes.policies import Policy
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_set_hash
from rlkit.model.build import build_tiny
from rlkit.model.policy import load_policy
from rlkit.notebook.plots import figure_png, load_run_evals
from rlkit.stats import CI_METHODS, PairedByMaze
from rlkit.train.config import TaskConfig, TrainConfig
from rlkit.train.config import preset as train_preset
from rlkit.train.runs import RunDir, checkpoint_problem
from rlkit.train.trainer import EVAL_SEED

SCRIPTED_BASELINES = ("random", "eps-oracle:0.25", "oracle")
"""The floor, a noisy planner and the ceiling: a trained model should land between them."""
BASE = "base"
"""Name of the untrained model's baseline (the training run's initial weights)."""
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
        build_tiny(path, seed=cfg.schedule.seed, config=cfg.model.tiny)
    return path


def _model_policy(model_dir: Path, cfg: TrainConfig, *, greedy: bool = False) -> Policy:
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
            make = lambda n=name: load_policy(n)  # noqa: E731
        results[name], _ = evaluate_cached(
            root / f"{_slug(name)}.json", make, samples=samples, task=cfg.task, label=name
        )
    return results


def cached_baselines(out_dir: str | Path) -> dict[str, EvalResult]:
    """Whatever `baseline_evals` cached under OUT/baselines/ (notebook 02), {} if nothing yet."""
    root = Path(out_dir) / "baselines"
    names = (*SCRIPTED_BASELINES, BASE)
    return {n: EvalResult.load(p) for n in names if (p := root / f"{_slug(n)}.json").is_file()}


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


def is_skyrl_export(source: str | Path) -> bool:
    return (Path(source) / "dumped_evals").is_dir()


def checkpoint_evals(source: str | Path, *, progress: bool = False) -> dict[int, EvalResult]:
    """`{step: EvalResult}` for every checkpoint of a run, ascending.

    A local run dir: the trainer's own evals, plus every complete checkpoint that has none yet,
    scored now with the run's eval settings (seed, samples, sampling) and cached in RUN/evals/.
    A SkyRL export dir (holding dumped_evals/): its eval dumps, read as they are.
    """
    if is_skyrl_export(source):
        return skyrl_readers.read_eval_dumps(source, policy=Path(source).name)
    run = RunDir(source)
    if not run.run_json.exists():
        raise UsageError(f"{source} is neither a run dir (run.json) nor a SkyRL export dir")
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
    RUN/evals/greedy/global_step_N.json. None for a SkyRL export (its evals are SkyRL's)."""
    if is_skyrl_export(source):
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


def milestones(evals: Mapping[int, EvalResult], boundary: int | None) -> dict[str, EvalResult]:
    """The rows worth a table: the first eval, the warm-start boundary, the last checkpoint."""
    if not evals:
        raise UsageError("no checkpoint evals yet: train first (notebook 03)")
    steps = sorted(evals)
    rows = {f"step {steps[0]} (start)": evals[steps[0]]}
    if boundary is not None and boundary in evals and boundary not in (steps[0], steps[-1]):
        rows[f"step {boundary} (warm start done)"] = evals[boundary]
    rows[f"step {steps[-1]} (final)"] = evals[steps[-1]]
    return rows


@dataclass(frozen=True)
class PairedTest:
    """Two checkpoints compared maze by maze on the same mazes (`rlkit.stats.PAIRED_METHOD`)."""

    step_a: int
    step_b: int
    test: PairedByMaze

    @property
    def verdict(self) -> str:
        return self.test.verdict(f"step {self.step_a}", f"step {self.step_b}")

    def __str__(self) -> str:
        t = self.test
        return (
            f"step {self.step_a} -> step {self.step_b}: {t.rate_a:.1%} -> {t.rate_b:.1%} on "
            f"{t.n_mazes} mazes x {t.samples} samples/maze, paired by maze; {self.verdict}"
        )


def grpo_paired_test(evals: Mapping[int, EvalResult], boundary: int | None) -> PairedTest:
    """Did GRPO help? GRPO's first checkpoint (the warm-start boundary, or the first eval when
    there was no warm start) against the last one, maze by maze."""
    steps = sorted(evals)
    if len(steps) < 2:
        raise UsageError(f"a paired test needs two evaluated checkpoints, found {len(steps)}")
    first = boundary if boundary in evals and boundary != steps[-1] else steps[0]
    return PairedTest(first, steps[-1], compare(evals[first], evals[steps[-1]]))


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


def eval_trajectories(run_dir: str | Path, step: int) -> list[Trajectory]:
    """The episodes the eval of `step` recorded in a local run dir."""
    path = RunDir(run_dir).eval_path(step)
    return EvalResult.load(path).load_trajectories(path)


# reporting


def solve_rate_table(rows: Mapping[str, EvalResult]) -> str:
    """Plain-text table: solve rate, 95% CI, pass@k and how many episodes stand behind it; the
    last line names the interval method (`ci_method`)."""
    if not rows:
        raise UsageError("solve_rate_table needs at least one eval result")
    width = max(len("policy"), *(len(n) for n in rows))
    lines = [f"{'policy':<{width}}   solve  95% CI             pass@k   episodes"]
    for name, r in rows.items():
        lo, hi = r.ci95
        best_k = max(r.pass_at_k, key=lambda k: int(k.split("@")[1]), default=None)
        pak = f"{r.pass_at_k[best_k]:.0%} @{best_k.split('@')[1]}" if best_k else "-"
        lines.append(
            f"{name:<{width}}  {r.solve_rate:6.1%}  [{lo:5.1%}, {hi:6.1%}]  {pak:<7}  "
            f"{r.n_mazes}x{r.samples}"
        )
    for method in sorted({r.ci_method for r in rows.values()}):
        lines.append(f"95% CI {method}: {CI_METHODS.get(method, 'unknown method')}")
    return "\n".join(lines)


def _row(r: EvalResult) -> dict:
    return {
        "policy": r.policy,
        "step": r.step,
        "solve_rate": round(r.solve_rate, 4),
        "ci95": [round(x, 4) for x in r.ci95],
        "ci_method": r.ci_method,
        "n_mazes": r.n_mazes,
        "samples": r.samples,
        "failures": r.failures,
    }


def build_summary(
    baselines: Mapping[str, EvalResult],
    evals: Mapping[int, EvalResult],
    *,
    boundary: int | None,
    paired: PairedTest | None,
    run: str,
    plots: list[str],
    greedy: EvalResult | None = None,
) -> dict:
    """The demo's summary.json: baseline (untrained model) and final solve rate with CI, and the
    paired by-maze test (its verdict in words, the difference with its interval); with
    `greedy` (`final_greedy_eval`), the last checkpoint's greedy solve rate too."""
    if not evals:
        raise UsageError("no checkpoint evals to summarise: train first (notebook 03)")
    final = evals[max(evals)]
    base = baselines.get(BASE) or evals[min(evals)]
    table = {**baselines, **milestones(evals, boundary)}
    if greedy is not None:
        table[f"step {greedy.step} greedy (k=1)"] = greedy
    return {
        "run": run,
        "headline": headline(base, evals, boundary, paired, greedy),
        "test_set_hash": final.test_set_hash,
        "baseline": _row(base),
        "final": _row(final),
        "final_greedy": None if greedy is None else _row(greedy),
        "warm_start_end": boundary,
        "paired_test": None
        if paired is None
        else {
            "steps": [paired.step_a, paired.step_b],
            "verdict": paired.verdict,
            **asdict(paired.test),
        },
        "baselines": {k: _row(v) for k, v in baselines.items()},
        "checkpoints": {str(s): _row(r) for s, r in sorted(evals.items())},
        "table": solve_rate_table(table).splitlines(),
        "plots": plots,
    }


def _rate(r: EvalResult) -> str:
    return f"{r.solve_rate:.1%} [{r.ci95[0]:.1%}, {r.ci95[1]:.1%}]"


def headline(
    base: EvalResult,
    evals: Mapping[int, EvalResult],
    boundary: int | None,
    paired: PairedTest | None,
    greedy: EvalResult | None = None,
) -> str:
    """One line: base -> warm start -> final with their intervals (and the final greedy one),
    then the paired verdict."""
    final_step = max(evals)
    parts = [f"base {_rate(base)}"]
    if boundary in evals and boundary != final_step:
        parts.append(f"warm start {_rate(evals[boundary])} (step {boundary})")
    final = f"final {_rate(evals[final_step])} (step {final_step})"
    parts.append(final + (f", greedy {_rate(greedy)}" if greedy is not None else ""))
    line = " -> ".join(parts) + f"; 95% CI {evals[final_step].ci_method}"
    return line + (f"; paired by maze: {paired.verdict}" if paired is not None else "")


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    path = Path(out_dir) / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path


def save_png(fig: Figure, out_dir: str | Path, name: str) -> Path:
    """Write a figure to OUT/plots/NAME.png (the demo's picture folder); returns the path."""
    path = Path(out_dir) / "plots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(figure_png(fig))
    return path
