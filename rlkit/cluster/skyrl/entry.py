"""The Ray-job entrypoint of a SkyRL run: write the datasets, register the maze env, run SkyRL.

GPU cluster only (SkyRL with its FSDP/vLLM extras, Python >= 3.12). `rlkit submit` builds the
command; by hand it is:

    python -m rlkit.cluster.skyrl.entry --data-dir /fsx/rlkit/runs/RUN/data --train-rows 256 \\
        -- trainer.policy.model.path=Qwen/Qwen3-VL-8B-Instruct ...

Everything after `--` is SkyRL's own `key=value` overrides. skyrl-gym's registry lives in each
process, so the env is registered inside the Ray task that builds SkyRL's generator (SkyRL's
documented custom-env pattern), not only in this driver.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlkit.cluster.hang import ACTIONS, DONE_LINE, HangRules, start_hang_detection
from rlkit.cluster.skyrl.presets import SkyRLPreset
from rlkit.errors import RlkitError, UsageError
from rlkit.settings import CaptureConfig, coerce_text, parse_sets


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """rlkit's own flags, then SkyRL's overrides after `--`."""
    if "--" in argv:
        cut = argv.index("--")
        ours, overrides = argv[:cut], argv[cut + 1 :]
    else:
        ours, overrides = [], argv
    parser = argparse.ArgumentParser(prog="python -m rlkit.cluster.skyrl.entry")
    parser.add_argument("--data-dir", help="write train/eval parquet here if missing")
    parser.add_argument("--preset", help="the rlkit preset the command came from (run.json)")
    parser.add_argument("--train-rows", type=int, default=256)
    parser.add_argument("--eval-set", default="test")
    parser.add_argument(
        "--cell-px", type=int, default=None, help="pixels a square of the rows' pictures"
    )
    parser.add_argument("--eval-rows", type=int, default=64, help="first N mazes of the set")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: SkyRL's trainer on a CPU host through rlkit's device seam (CPU presets)",
    )
    parser.add_argument(
        "--driver-memory-gb",
        type=int,
        default=0,
        help="Ray memory SkyRL's trainer task reserves (keeps it off a small head pod)",
    )
    parser.add_argument(
        "--init-model",
        metavar="DIR",
        help="build rlkit's warm-started tiny model here if missing (preset model rlkit:tiny-warm)",
    )
    preset = SkyRLPreset  # its defaults: what a command written by hand gets
    parser.add_argument(
        "--init-stop-at",
        type=float,
        default=preset.warm_start_to,
        help="validation solve rate the tiny model's warm start stops at",
    )
    parser.add_argument(
        "--capture-groups",
        type=int,
        default=preset.capture_groups,
        help="groups of each training step captured under RUN/rollouts/ (0 = off)",
    )
    parser.add_argument(
        "--capture-keep",
        type=lambda text: coerce_text(text, "--capture-keep", int),
        default=preset.capture_keep,
        help="steps whose captured rollouts stay (the newest)",
    )
    hang = HangRules()
    parser.add_argument(
        "--hang-minutes",
        type=int,
        default=hang.stall_minutes,
        help="HyperPod hang detection: minutes without a step line (0 = off)",
    )
    parser.add_argument("--hang-start-minutes", type=int, default=hang.start_minutes)
    parser.add_argument("--hang-action", choices=ACTIONS, default=hang.action)
    args = parser.parse_args(ours)
    args.capture = CaptureConfig(args.capture_groups, args.capture_keep)
    parse_sets(overrides, "SkyRL override")
    return args, overrides


def ensure_datasets(
    data_dir: str, train_rows: int, eval_set: str, eval_rows: int = 64, cell_px: int | None = None
) -> tuple[Path, Path]:
    """Write the datasets once per run dir; a resumed run must see the same rows. `cell_px`:
    the preset's view of the set (None: the set's own)."""
    from rlkit.cluster.skyrl.preset_checks import set_view
    from rlkit.env.data import write_datasets

    out = Path(data_dir)
    train, evals = out / "train.parquet", out / "eval.parquet"
    if train.is_file() and evals.is_file():
        print(f"rlkit: reusing datasets in {out}", flush=True)
        return train, evals
    cfg = set_view(eval_set, cell_px)
    paths = write_datasets(out, train_rows, eval_set=eval_set, n_eval=eval_rows, cfg=cfg)
    print(f"rlkit: wrote {paths[0]} and {paths[1]}", flush=True)
    return paths


def ensure_init_model(model_dir: str, stop_at: float) -> Path:
    """Build the run's warm-started tiny model once; a resumed run loads its checkpoint, but
    SkyRL reads the model dir for its config and tokenizer on every start."""
    out = Path(model_dir)
    if (out / "config.json").is_file():
        print(f"rlkit: reusing the tiny model in {out}", flush=True)
        return out
    from rlkit.train.warm_model import warm_tiny_model

    print(f"rlkit: building the warm-started tiny model in {out}", flush=True)
    return warm_tiny_model(out, stop_at=stop_at)


def record_run(cfg, args: argparse.Namespace, overrides: list[str]) -> dict:
    """Write RUN/run.json (backend "skyrl") before SkyRL starts: the run's own config (rlkit's
    entry settings, SkyRL's overrides and its whole resolved config), which the notebooks read
    back instead of the preset. A resume that changed the config records the change."""
    import dataclasses
    import json

    from rlkit.run.rundir import RunDir
    from rlkit.run.skyrl_layout import latest_step

    run = RunDir(cfg.trainer.ckpt_path)
    ours = {k: v for k, v in vars(args).items() if not k.startswith(("hang", "capture"))}
    ours |= {"capture_groups": args.capture.groups, "capture_keep": args.capture.keep}
    config = {
        "entry": ours,
        "overrides": parse_sets(overrides, "SkyRL override"),
        "skyrl": json.loads(json.dumps(dataclasses.asdict(cfg), default=str)),
    }
    seed = int(cfg.trainer.seed)
    info = run.init(preset=args.preset, seed=seed, backend="skyrl", config=config)
    old = info.get("config") or {}
    if old != json.loads(json.dumps(config, default=str)):
        changed = {
            k: [old.get("overrides", {}).get(k), v]
            for k, v in config["overrides"].items()
            if old.get("overrides", {}).get(k) != v
        }
        run.record_config(config, changed, step=latest_step(run.path) or 0)
    return config


def _run_skyrl(cfg, hang: HangRules, capture: CaptureConfig) -> None:
    """Body of the Ray task: register the env in this process, then SkyRL's experiment.

    The step lines come from this process (the bridged tracker), so HyperPod's hang rules are
    registered here, with this task's Ray job and worker ids. `capture`: the captured training
    rollouts.
    """
    from rlkit.cluster.skyrl.experiment import RlkitExp
    from rlkit.env.maze_env import register_env

    register_env()
    print(f"rlkit: {start_hang_detection(hang)}", flush=True)
    # SkyRL's experiment, its metrics bridged into the run dir
    RlkitExp(cfg, capture).run()
    print(DONE_LINE, flush=True)


def init_ray(cfg, device: str, initialize_ray) -> None:
    """SkyRL's `initialize_ray(cfg)` (its env vars, log file and registries), with the
    runtime_env it hands `ray.init` carrying rlkit's worker setup hook and the device."""
    import ray

    from rlkit.cluster.skyrl.worker_setup import runtime_env

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
    args, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
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
    if args.data_dir:
        ensure_datasets(args.data_dir, args.train_rows, args.eval_set, args.eval_rows, args.cell_px)
    if args.init_model:
        ensure_init_model(args.init_model, args.init_stop_at)
    if args.device == "cpu":
        from rlkit.cluster.skyrl import cpu_seam

        cpu_seam.install()  # this driver builds vLLM's arguments, as SkyRL's workers do
        run_dir = SkyRLTrainConfig.from_cli_overrides(overrides).trainer.ckpt_path
        overrides = [*overrides, *cpu_seam.overrides(run_dir)]
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    record_run(cfg, args, overrides)
    init_ray(cfg, args.device, initialize_ray)
    # SkyRL's trainer task holds every rollout's pixel values: reserve memory only a GPU
    # worker has, so Ray cannot place it on the head pod
    task = ray.remote(num_cpus=1, memory=args.driver_memory_gb * 2**30 or None)(_run_skyrl)
    hang = HangRules(args.hang_minutes, args.hang_start_minutes, args.hang_action)
    ray.get(task.remote(cfg, hang, args.capture))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RlkitError as e:
        print(f"rlkit: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, UsageError) else 1)
