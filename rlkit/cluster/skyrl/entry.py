"""The Ray-job entrypoint of a SkyRL run: write the datasets, register the maze env, run SkyRL
(`rlkit submit` builds its command): docs/skyrl-integration.md#the-entry-entrypy."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.hang import DONE_LINE, start_hang_detection
from rlkit.cluster.skyrl.overrides import RunPaths
from rlkit.cluster.skyrl.preset_sections import set_view, task_view
from rlkit.cluster.skyrl.presets import TINY_WARM, SkyRLPreset, get_preset
from rlkit.errors import RlkitError, UsageError
from rlkit.settings import parse_sets

if TYPE_CHECKING:
    from rlkit.env.maze_env import EnvConfig

GIGPO = "gigpo"
"""The estimator rlkit registers with SkyRL (episode level: GRPO; step level: `step_terms`)."""


@dataclass(frozen=True)
class Job:
    """What the entry was asked to run: the preset's name and settings, the run's paths."""

    preset: str | None
    sky: SkyRLPreset
    paths: RunPaths | None


def parse_args(argv: list[str]) -> tuple[Job, list[str]]:
    """rlkit's own flags (the preset), then SkyRL's overrides after `--`."""
    if "--" in argv:
        cut = argv.index("--")
        ours, overrides = argv[:cut], argv[cut + 1 :]
    else:
        ours, overrides = [], argv
    parser = argparse.ArgumentParser(prog="python -m rlkit.cluster.skyrl.entry")
    parser.add_argument("--preset", help="the rlkit preset the command came from (run.json)")
    parser.add_argument(
        "--config",
        metavar="JSON",
        help="the preset's settings (SkyRLPreset.to_json); without it, the named preset's",
    )
    args = parser.parse_args(ours)
    if args.config is not None:
        sky = SkyRLPreset.from_json(args.config)
    else:
        sky = get_preset(args.preset) if args.preset else SkyRLPreset()
    run_dir = parse_sets(overrides, "SkyRL override").get("trainer.ckpt_path")
    return Job(args.preset, sky, RunPaths.at(run_dir) if run_dir else None), overrides


def ensure_datasets(
    data_dir: str,
    train_rows: int,
    eval_set: str,
    eval_rows: int = 64,
    cell_px: int | None = None,
    shares: list[float] | None = None,
    cfg: EnvConfig | None = None,
) -> tuple[Path, Path]:
    """Write the datasets once per run dir (a resume reads them back); `shares`: each training
    row's curriculum share; `cfg`: the rows' env (None: `set_view`)."""
    from rlkit.env.data import read_rows, write_datasets

    out = Path(data_dir)
    train, evals = out / "train.parquet", out / "eval.parquet"
    if train.is_file() and evals.is_file():
        for rows in (train, evals):
            read_rows(rows)  # a damaged file: one line, here
        print(f"rlkit: reusing datasets in {out}", flush=True)
        return train, evals
    cfg = cfg or set_view(eval_set, cell_px)
    paths = write_datasets(
        out, train_rows, eval_set=eval_set, n_eval=eval_rows, cfg=cfg, shares=shares
    )
    print(f"rlkit: wrote {paths[0]} and {paths[1]}", flush=True)
    return paths


def curriculum_shares(sky: SkyRLPreset) -> list[float] | None:
    """Each training row's curriculum share (row i trains at step i // prompts per step)."""
    from rlkit.maze.sets import curriculum_share

    r, n = sky.recipe, sky.prompts_per_step
    if r.curriculum_steps is None:
        return None
    return [
        curriculum_share(i // n, r.curriculum_steps, r.curriculum_start)
        for i in range(sky.train_rows)
    ]


def ensure_init_model(model_dir: str, stop_at: float) -> Path:
    """Build the run's warm-started tiny model once (SkyRL reads its dir on every start)."""
    out = Path(model_dir)
    if (out / "config.json").is_file():
        print(f"rlkit: reusing the tiny model in {out}", flush=True)
        return out
    from rlkit.train.warm_model import warm_tiny_model

    print(f"rlkit: building the warm-started tiny model in {out}", flush=True)
    return warm_tiny_model(out, stop_at=stop_at)


def add_eval_sets(data_dir: str, sky: SkyRLPreset) -> None:
    """With several eval sets: their rows in eval.parquet, each row's turn budget in its
    `extra_info.max_turns` (`row_turns`), once a run."""
    from rlkit.env.data import maze_row, read_rows, write_rows
    from rlkit.env.maze_env import ENV_ID
    from rlkit.maze.sets import pinned_set

    out, budgets = Path(data_dir), sky.turn_budgets
    evals = read_rows(out / "eval.parquet")
    written = {r["data_source"] for r in evals}
    if len(budgets) < 2 or all(f"{ENV_ID}/{s}" in written for s in budgets):
        return
    for name in sky.eval_set_names[1:]:
        cfg = task_view(dataclasses.replace(sky.task, eval_set=name))  # the run's answer format
        mazes = pinned_set(name)[: sky.eval.eval_mazes]
        source = f"{ENV_ID}/{name}"
        evals += [
            maze_row(m, split="eval", index=i, source=source, cfg=cfg) for i, m in enumerate(mazes)
        ]
    for file, rows in (
        ("train.parquet", read_rows(out / "train.parquet")),
        ("eval.parquet", evals),
    ):
        for row in rows:
            own = budgets.get(row["data_source"].rsplit("/", 1)[-1], sky.task.max_turns)
            row["extra_info"] = {**row["extra_info"], "max_turns": own}
        write_rows(out / file, rows)
    print(f"rlkit: eval sets {', '.join(budgets)} in {out / 'eval.parquet'}", flush=True)


def record_run(cfg, job: Job, overrides: list[str]) -> dict:
    """Write RUN/run.json before SkyRL starts (preset, overrides, resolved config); a resume
    that changed the config records the change."""
    from rlkit.env.visgym_text import read_prompt_file
    from rlkit.run.rundir import RunDir
    from rlkit.run.skyrl_layout import latest_step

    run = RunDir(cfg.trainer.ckpt_path)
    prompt = job.sky.task.prompt_file
    config = {
        "entry": {"preset": job.preset, **dataclasses.asdict(job.sky)},
        **({"prompt_sha256": read_prompt_file(prompt)[1]} if prompt else {}),
        "overrides": parse_sets(overrides, "SkyRL override"),
        "skyrl": json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
    }
    info = run.init(preset=job.preset, seed=int(cfg.trainer.seed), backend="skyrl", config=config)
    old = info.get("config") or {}
    if old != json.loads(json.dumps(config, default=str)):
        changed = {
            k: [old.get("overrides", {}).get(k), v]
            for k, v in config["overrides"].items()
            if old.get("overrides", {}).get(k) != v
        }
        run.record_config(config, changed, step=latest_step(run.path) or 0)
    return config


def register_gigpo() -> None:
    """SkyRL's registry knows `gigpo` (idempotent: its episode level is SkyRL's GRPO)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        AdvantageEstimatorRegistry,
        compute_grpo_outcome_advantage,
    )

    if GIGPO not in AdvantageEstimatorRegistry.list_available():
        AdvantageEstimatorRegistry.register(GIGPO, compute_grpo_outcome_advantage)


def _run_skyrl(cfg, sky: SkyRLPreset, rows_in_order: bool = False) -> None:
    """The Ray task: register the env, `gigpo` and the hang rules, then run SkyRL's experiment."""
    from rlkit.cluster.skyrl.experiment import RlkitExp
    from rlkit.env.maze_env import register_env

    register_env()
    gigpo = sky.recipe.advantage_estimator == GIGPO
    if gigpo:
        register_gigpo()
    print(f"rlkit: {start_hang_detection(sky.hang)}", flush=True)
    both = sky.eval.eval_protocol == "both"
    RlkitExp(
        cfg,
        sky.capture,
        rows_in_order=rows_in_order,
        sampled_eval=(sky.eval.eval_samples, sky.eval.eval_temperature) if both else None,
        history=sky.task.history,
        gigpo=sky.recipe if gigpo else None,
    ).run()
    print(DONE_LINE, flush=True)


def init_ray(cfg, device: str, initialize_ray) -> None:
    """SkyRL's `initialize_ray(cfg)`, its `ray.init`'s runtime_env with rlkit's setup hook."""
    import ray

    from rlkit.cluster.skyrl.fixes import runtime_env

    real_init = ray.init
    placement = cfg.trainer.placement
    bundles = placement.policy_num_nodes * placement.policy_num_gpus_per_node

    def init(*args, **kwargs):
        env_vars = dict((kwargs.pop("runtime_env", None) or {}).get("env_vars") or {})
        return real_init(*args, runtime_env=runtime_env(env_vars, device, bundles), **kwargs)

    ray.init = init
    try:
        initialize_ray(cfg)
    finally:
        ray.init = real_init


def main(argv: list[str] | None = None) -> int:
    job, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        import ray
        from skyrl.train.config import SkyRLTrainConfig
        from skyrl.train.utils import validate_cfg
        from skyrl.train.utils.utils import initialize_ray
    except ImportError as e:
        raise RlkitError(
            f"SkyRL is not installed here ({e.name}): run this in rlkit's cluster runtime, the "
            "image deploy/Dockerfile builds (deploy/build-image.sh) with SkyRL's uv env on PATH"
        ) from e
    import multiprocessing as mp

    # vLLM and CUDA do not survive fork; SkyRL's own entrypoints force spawn too.
    mp.set_start_method("spawn", force=True)
    sky, paths = job.sky, job.paths
    if paths is None:
        raise UsageError("give SkyRL's trainer.ckpt_path=RUN_DIR: the run dir holds the rows")
    shares = curriculum_shares(sky)
    args = (paths.data_dir, sky.train_rows, sky.task.eval_set, sky.eval.eval_mazes)
    ensure_datasets(*args, shares=shares, cfg=task_view(sky.task))
    add_eval_sets(paths.data_dir, sky)
    if sky.model.model_path == TINY_WARM:
        ensure_init_model(paths.init_model_dir, sky.model.warm_start_to)
    if sky.layout.device == "cpu":
        from rlkit.cluster.skyrl import cpu_seam
        from rlkit.cluster.skyrl.fixes import install_cpu_seam

        install_cpu_seam()  # this driver builds vLLM's arguments, as SkyRL's workers do
        overrides = [*overrides, *cpu_seam.overrides(paths.run_dir)]
    if sky.recipe.advantage_estimator == GIGPO:  # SkyRL's validate_cfg looks it up
        register_gigpo()
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    record_run(cfg, job, overrides)
    init_ray(cfg, sky.layout.device, initialize_ray)
    # SkyRL's trainer task holds every rollout's pixel values: reserve memory only a GPU
    # worker has, so Ray cannot place it on the head pod
    task = ray.remote(num_cpus=1, memory=sky.layout.driver_memory_gb * 2**30 or None)(_run_skyrl)
    ray.get(task.remote(cfg, sky, shares is not None))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RlkitError as e:
        print(f"rlkit: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, UsageError) else 1)
