"""Notebook-level steps of notebooks 00-05: plan a run, open a run of either backend, score its
checkpoints, pick mazes to replay.

    run = workbench.open_source(workbench.run_source("runs/demo", "local-tiny", run_dir=None))
    evals = workbench.checkpoint_evals(run)
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from rlkit.episodes.evaluate import EVAL_SEED, EvalResult, evaluate
from rlkit.episodes.failures import KINDS, classify
from rlkit.episodes.policies import Policy
from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_set_hash
from rlkit.notebook.paths import home_path
from rlkit.notebook.player import disagreement
from rlkit.notebook.plots import figure_png
from rlkit.notebook.report import grpo_paired_test
from rlkit.run import Run, open_run, run_or_none
from rlkit.run.backends import LocalRun
from rlkit.train.config import TaskConfig, TrainConfig
from rlkit.train.presets import preset as train_preset
from rlkit.train.run_config import config_from_dict

if TYPE_CHECKING:
    from rlkit.cluster.launch import TrainingPlan

PACKAGES = ("torch", "transformers", "ray", "ipywidgets", "papermill", "rlkit")
LOCAL_TRAINING = frozenset({"torch", "transformers"})
"""Needed only to train in this kernel: a cluster client has neither, and that is no problem."""
CLUSTER_VERSIONS = {"python": "3.12", "torch": "2.13.0", "transformers": "5.16.1", "ray": "2.57.0"}
"""What the cluster runs (requirements/cluster-pins.txt; a test keeps the two equal)."""


def kernel_report() -> dict[str, str]:
    """Python and package versions of this kernel, problems under `problems` (a torch-free client
    is noted under `local_training`, not as a problem)."""
    report = {"python": platform.python_version(), "executable": sys.executable}
    for name in PACKAGES:
        try:
            report[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            report[name] = "missing"
    missing = [n for n in PACKAGES if report[n] == "missing"]
    problems = [f"{n} is not installed in this kernel" for n in missing if n not in LOCAL_TRAINING]
    for name, want in CLUSTER_VERSIONS.items():
        have = report[name]
        if have != "missing" and have != want and not have.startswith(want + "."):
            problems.append(
                f"{name} {have} here, the cluster runs {want}: build the kernel from environment.yml"
            )
    if LOCAL_TRAINING & set(missing):
        report["local_training"] = (
            "no (a cluster client: no torch here; environment-train.yml trains locally)"
        )
    report["problems"] = "; ".join(problems) or "none"
    return report


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
    protocol: str = "rlkit",
) -> tuple[EvalResult, list[Trajectory]]:
    """Evaluate once and keep the result (JSON + trajectories) at `path`; later calls with the
    same test set, samples, mode and protocol read it."""
    task = task or TaskConfig()
    path = Path(path)
    if path.is_file():
        cached = EvalResult.load(path)
        key = (cached.samples, cached.mode, cached.protocol, cached.test_set_hash)
        if key == (samples, mode, protocol, pinned_set_hash(task.eval_set)) and cached.trajectories:
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
        protocol=protocol,
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


def model_policy(model_dir: Path, cfg: TrainConfig, *, greedy: bool = False) -> Policy:
    from rlkit.model.policy import load_policy

    m = cfg.model
    return load_policy(
        model_dir, temperature=m.temperature, greedy=greedy, constrained=m.constrained
    )


def plan_run(
    preset: str,
    out_dir: str | Path,
    *,
    address: str | None = None,
    run_name: str | None = None,
    skyrl: Mapping[str, object] | None = None,
    recipe: Mapping[str, Any] | None = None,
) -> TrainingPlan:
    """Notebook 03's plan (nothing submitted): `preset` with `recipe` switches and, for SkyRL,
    `skyrl` preset fields changed; a switch the backend cannot honour is refused here."""
    from rlkit.cluster.launch import plan_training  # imports Ray: only when planning

    where = {"address": address, "run_name": run_name}
    return plan_training(preset, out_dir, **where, skyrl_changes=skyrl, recipe=recipe)


def run_config(run: Run | str | Path) -> TrainConfig:
    """The config a local run was trained with, from its run.json (else the preset it names)."""
    run = open_run(run)
    info = run.info()
    if run.backend != "local" or not (info.get("config") or info.get("preset")):
        raise UsageError(f"{run.path} holds no local run.json with a config: nothing to rebuild")
    if not info.get("config"):
        return train_preset(info["preset"])
    return config_from_dict(info["config"], where=f"{run.path / 'run.json'}")


def open_source(source: str | Path, *, address: str | None = None, cluster: Any = None) -> Run:
    """The run at `source` (relative: to `home()`), through `cluster` or `address` if not here."""
    path = home_path(source)
    if not path.exists() and cluster is None and address is not None:
        from rlkit.cluster.client import connect  # Ray: only when the files are elsewhere

        cluster = connect(address)
    if not path.exists() and cluster is not None:
        print(f"{source} is not visible here: reading it through the cluster at {cluster.address}")
    return open_run(path, cluster)


def run_source(
    out_dir: str | Path,
    preset: str,
    *,
    run_name: str | None = None,
    run_dir: str | Path | None = None,
    skyrl_export: str | Path | None = None,
) -> Path:
    """`run_dir` or `skyrl_export` (an export dir inside its run dir: the run dir), else the run
    of `preset` under OUT that notebook 03 trains; relative paths: to `home()`."""
    if run_dir and skyrl_export:
        raise UsageError(f"run_dir ({run_dir}) and skyrl_export ({skyrl_export}): give one")
    given = run_dir or skyrl_export
    if not given:
        from rlkit.cluster.launch import plan_training  # imports Ray: only when planning

        return Path(plan_training(preset, home_path(out_dir), run_name=run_name).run_dir)
    run = run_or_none(home_path(given))
    return run.path if run is not None else home_path(given)


def checkpoint_evals(source: str | Path | Run) -> dict[int, EvalResult]:
    """`{step: EvalResult}` of every checkpoint: a local run's evals, a missing one scored now
    with the run's config (cached in RUN/evals/); a SkyRL run's (sampled when both protocols)."""
    run = open_run(source)
    if not isinstance(run, LocalRun):
        return run.sampled_evals() or run.evals()
    if not run.dir.run_json.exists():
        raise UsageError(
            f"{run.path} is neither a run dir (run.json) nor a SkyRL run dir or export dir"
        )
    evaluated = set(run.dir.eval_steps())
    missing = [c for c in run.checkpoints() if c.complete and c.step not in evaluated]
    if not missing:
        return run.evals()
    cfg = run_config(run)
    for ckpt in missing:
        evaluate_cached(
            run.dir.eval_path(ckpt.step),
            partial(model_policy, ckpt.path / "policy", cfg, greedy=cfg.schedule.eval_greedy),
            samples=cfg.schedule.eval_samples,
            task=cfg.task,
            seed=EVAL_SEED,
            label=f"{run.name}@{ckpt.step}",
            step=ckpt.step,
        )
    return run.evals()


def other_eval_sets(source: str | Path | Run) -> dict[str, dict[int, EvalResult]]:
    """The evals of a run's other eval sets (SkyRL's `eval_sets`), by set; {} for one set."""
    _, *others = open_run(source).evals_by_set().items()
    return dict(others)


def final_greedy_eval(source: str | Path | Run) -> EvalResult | None:
    """The last checkpoint under the seed's protocol: a local run's played now (cached in
    RUN/evals/greedy/), a SkyRL run's last seed eval when it logged both protocols, else None."""
    run = open_run(source)
    if not isinstance(run, LocalRun):
        seed = run.evals() if run.sampled_evals() else {}
        return seed[max(seed)] if seed else None
    ckpt = run.latest_checkpoint() if run.dir.run_json.exists() else None
    if ckpt is None or ckpt.path is None:
        raise UsageError(f"{source} holds no complete checkpoint yet: train first (notebook 03)")
    cfg = run_config(run)
    result, _ = evaluate_cached(
        run.dir.evals_dir / "greedy" / f"global_step_{ckpt.step}.json",
        partial(model_policy, ckpt.path / "policy", cfg, greedy=True),
        samples=1,
        task=cfg.task,
        seed=EVAL_SEED,
        label=f"{run.name}@{ckpt.step} greedy",
        step=ckpt.step,
        mode="greedy",
        protocol="seed",
    )
    return result


def diff_maze(a: EvalResult, b: EvalResult) -> int:
    """A maze to replay side by side: A failed and B solved, else they differ, else 0."""
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
    found = {classify(t): t for t in reversed(trajs)}  # the first of each kind wins
    return {k: found[k] for k in (*KINDS, *sorted(set(found) - {*KINDS, None})) if k in found}


def eval_trajectories(source: str | Path | Run, step: int) -> list[Trajectory]:
    """The episodes the eval of `step` played, in its EvalResult's order (`episode` picks one)."""
    return open_run(source).trajectories(step)


@dataclass(frozen=True)
class RunReplays:
    """Notebook 05's maze at the last evaluated step and, with two evals, at GRPO's first."""

    run: str
    maze: int
    last: EvalResult
    last_trajs: list[Trajectory] = field(repr=False)
    first: EvalResult | None = None
    first_trajs: list[Trajectory] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        return f"step {self.last.step}"

    @property
    def labels(self) -> tuple[str, str]:
        first = self.first.step if self.first is not None else None
        return f"step {first}", self.label

    @property
    def episode(self) -> Trajectory:
        return episode(self.last_trajs, self.last, self.maze)

    @property
    def pair(self) -> tuple[Trajectory, Trajectory] | None:
        """Sample 0 of `maze` at the first and the last step; None with one eval."""
        if self.first is None:
            return None
        return episode(self.first_trajs, self.first, self.maze), self.episode

    @property
    def disagreement(self) -> str | None:
        pair = self.pair
        return None if pair is None else disagreement(*pair, self.labels)

    def failures(self) -> dict[str, Trajectory]:
        return failure_examples(self.last_trajs)

    def __str__(self) -> str:
        than = f", against step {self.first.step}" if self.first is not None else ""
        return f"{self.run}: maze {self.maze} at step {self.last.step}{than}"


def run_replays(source: str | Path | Run, *, maze: int | None = None) -> RunReplays:
    """A run's replays; `maze` None: one where GRPO's first and last checkpoints differ."""
    run = open_run(source)
    evals = checkpoint_evals(run)
    if not evals:
        raise UsageError(f"{run.name} has no evaluated checkpoint yet: train first (notebook 03)")
    if len(evals) == 1:
        ((step, last),) = evals.items()
        return RunReplays(run.name, maze or 0, last, eval_trajectories(run, step))
    paired = grpo_paired_test(evals, run.warm_start_end())
    first, last = evals[paired.step_a], evals[paired.step_b]
    return RunReplays(
        run.name,
        diff_maze(first, last) if maze is None else maze,
        last,
        eval_trajectories(run, paired.step_b),
        first,
        eval_trajectories(run, paired.step_a),
    )


def save_png(fig: Figure, out_dir: str | Path, name: str) -> Path:
    """Write a figure to OUT/plots/NAME.png; returns the path."""
    path = Path(out_dir) / "plots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(figure_png(fig))
    return path


def keep(fig: Figure, out_dir: str | Path | None, name: str) -> Figure:
    """The figure, also written to OUT/plots/NAME.png when `out_dir` is set."""
    if out_dir is not None:
        save_png(fig, home_path(out_dir), name)
    return fig
