"""`rlkit jobs`, `rlkit submit`, `rlkit preflight` and `rlkit model stage`: Ray jobs from a terminal,
the same calls as the notebooks (`register` adds them to the main parser). Usage: docs/cli.md."""

from __future__ import annotations

import argparse
import os
import sys

from rlkit.errors import UsageError
from rlkit.run.remote import follow


def cli_connect(args: argparse.Namespace, *, start_local: bool = False):
    """The cluster `--address` names (none or `local`: the local head, started if `start_local`)."""
    from rlkit.cluster.client import connect

    cluster = connect(args.address, start_local=start_local)
    for note in cluster.notes:
        print(f"note: {note}", file=sys.stderr)
    return cluster


def _jobs_list(args: argparse.Namespace) -> int:
    cluster = cli_connect(args)
    records = cluster.jobs()
    from rlkit.cluster.jobs import format_jobs, records_for_run

    if args.run:
        records = records_for_run(args.run, records)
    print(format_jobs(records, cluster.address))
    return 0


def _job(args: argparse.Namespace) -> int:
    """`rlkit jobs status|logs|stop JOB`: a submission id, or a run name for its newest job."""
    cluster = cli_connect(args)
    if args.job.startswith(("rlkit-", "raysubmit_")):
        job = cluster.job(args.job)
    else:
        job = cluster.reattach(args.job)
    if args.jobs_command == "status":
        print(f"{job.submission_id} {job.status().value}")
    elif args.jobs_command == "stop":
        stopped = job.stop()
        print(f"{job.submission_id}: {'stop requested' if stopped else 'had already ended'}")
    elif not args.follow:
        print(job.logs(), end="")
    else:
        try:
            follow(job, lambda chunk: print(chunk, end="", flush=True))
        except KeyboardInterrupt:
            print(f"\nstopped following; the job runs on (rlkit jobs stop {job.submission_id})")
    return 0


def _forwarded_env(names: list[str]) -> dict[str, str]:
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise UsageError(f"--env {' '.join(missing)}: not set in this shell; export it first")
    return {n: os.environ[n] for n in names}


def _submit(args: argparse.Namespace) -> int:
    from rlkit.cluster.client import mask_env
    from rlkit.cluster.launch import (
        launch_plan,
        plan_line,
        plan_training,
        pod_summary,
        preset_backend,
    )
    from rlkit.cluster.skyrl.preset_checks import storage_estimate
    from rlkit.settings import parse_sets

    changes = {k: v for k in args.skyrl_fields if (v := getattr(args, k)) is not None}
    if preset_backend(args.preset) == "local":  # the local trainer as a job: its own --set keys
        skyrl_only = [k for k in changes if k != "runs_root"]
        skyrl_only += [k for k in ("raycluster", "rayjob", "image") if getattr(args, k)]
        if skyrl_only:
            raise UsageError(
                f"{args.preset} is a local preset: --{skyrl_only[0].replace('_', '-')} applies "
                "to SkyRL presets (change a local one with --set section.field=value)"
            )
        out_dir = args.runs_root or "runs"
        plan = plan_training(
            args.preset, out_dir, address=args.address, run_name=args.run_name, overrides=args.set
        )
    else:
        changes |= parse_sets(args.set)
        plan = plan_training(
            args.preset, ".", address=args.address, run_name=args.run_name, skyrl_changes=changes
        )
    env_vars = _forwarded_env(args.env)
    if args.image and not (args.raycluster or args.rayjob):
        raise UsageError("--image fills a manifest's image: use it with --raycluster or --rayjob")
    if args.raycluster:
        from rlkit.cluster.raycluster import raycluster, write_manifest

        out = write_manifest(args.raycluster, raycluster(plan.sky, image=args.image))
        print(f"wrote {out}: {pod_summary(plan.sky)}")
        print(plan_line("start it", f"kubectl apply -n ray -f {out}"))
        return 0
    if args.rayjob:
        from rlkit.cluster.raycluster import rayjob, secret_command, write_manifest

        manifest = rayjob(
            plan.sky,
            plan.run_name,
            backoff_limit=args.backoff_limit,
            preset_name=plan.preset,
            image=args.image,
            env=list(env_vars),
        )
        out = write_manifest(args.rayjob, manifest)
        print(f"wrote {out}: a RayJob retried up to {args.backoff_limit} times on new clusters")
        print(plan_line("storage", storage_estimate(plan.sky).summary()))
        ships = "the image's own (a RayJob ships no checkout): rebuild it after changes"
        print(plan_line("rlkit", ships))
        if env_vars:
            print(plan_line("secret first", secret_command(plan.run_name, list(env_vars))))
        print(plan_line("start it", f"kubectl apply -n ray -f {out}"))
        return 0
    if plan.dry_run and not args.dry_run:
        raise UsageError(
            f"{args.preset} needs {plan.sky.num_gpus} GPUs and the local Ray head has none: "
            "give --address of a GPU cluster, or --dry-run to see what would run"
        )
    print(plan)
    if args.dry_run:
        if env_vars:  # what the job would get besides the plan: the values never printed
            masked = " ".join(f"{k}={v}" for k, v in mask_env(env_vars).items())
            print(plan_line("env vars", masked))
        print(plan_line("job", f"rlkit-{plan.run_name}-<next>: nothing submitted (--dry-run)"))
        return 0
    cluster = cli_connect(args, start_local=True)
    job = launch_plan(plan, cluster, env_vars=env_vars)
    print(cluster.last_submission)  # what Ray received: id, working dir, env masked, metadata
    follow = f"rlkit jobs logs {job.submission_id} --follow"
    print(plan_line("job", f"{job.submission_id} submitted; follow: {follow}"))
    return 0


def _jobs_watch(args: argparse.Namespace) -> int:
    from rlkit.cluster.watch import watch

    stall = args.stall_minutes * 60 if args.stall_minutes else None
    job = watch(
        cli_connect(args), args.run, resubmit=args.resubmit, poll_s=args.poll, stall_s=stall
    )
    return 0 if job.status().value == "SUCCEEDED" else 1


def _preflight(args: argparse.Namespace) -> int:
    from rlkit.cluster.preflight import format_checks, preflight
    from rlkit.cluster.skyrl.preset_checks import check_budget
    from rlkit.cluster.skyrl.presets import get_preset

    changes = {
        k: v for k, v in {"model_path": args.model, "runs_root": args.runs_root}.items() if v
    }
    # SkyRL's traps, and a turn budget that cannot fit, are refused before any job starts
    check_budget(get_preset(args.preset, **changes))
    checks = preflight(cli_connect(args, start_local=True), args.preset, gpu=args.gpu, **changes)
    print(format_checks(checks))
    return 1 if any(c.status == "fail" for c in checks) else 0


def repeated(p: argparse.ArgumentParser, flag: str, metavar: str, help_: str) -> None:
    """A flag given any number of times, its values listed in order."""
    p.add_argument(flag, action="append", default=[], metavar=metavar, help=help_)


def add_stage_arguments(p: argparse.ArgumentParser) -> None:
    """`rlkit model stage MODEL --to DIR --address ADDR` (its `kind` is the `model` parser's)."""
    p.add_argument(
        "source",
        nargs="?",
        help="stage: a hub id (org/name), or a directory on the cluster (/DIR or file:///DIR)",
    )
    p.add_argument("--to", help="stage: absolute path on shared storage (default /fsx/models/NAME)")
    p.add_argument("--revision", help="stage: hub revision (default: the newest)")
    p.add_argument(
        "--address", help="stage: Jobs API URL of the cluster (default: $RAY_ADDRESS, else local)"
    )
    repeated(p, "--env", "NAME", "stage: forward, e.g. HF_TOKEN")


def model_stage(args: argparse.Namespace) -> int:
    """Stage a model on the cluster's shared storage with one small Ray job."""
    from rlkit.cluster.stage import parse_source, stage_model, staged_path

    if not args.source:
        raise UsageError("rlkit model stage MODEL --to /fsx/models/NAME: name the model to stage")
    kind, where = parse_source(args.source)
    dest = args.to or staged_path(where)
    env_vars = _forwarded_env(args.env)
    record = stage_model(
        cli_connect(args, start_local=True),
        args.source,
        dest,
        revision=args.revision,
        env_vars=env_vars,
    )
    print(
        f"staged {args.source} at {record['path']}: {record['files']} files, "
        f"{record['bytes'] / 1e9:.2f} GB, verified in {record['seconds']:.0f} s; "
        f"use it: --model {record['path']}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `jobs {list|status|logs|stop}`, `submit` and `preflight` to the `rlkit` parser."""
    from rlkit.cluster.skyrl.presets import PRESETS

    address = argparse.ArgumentParser(add_help=False)
    address.add_argument(
        "--address",
        help="Jobs API URL (http://HEAD:8265, sagemaker_ray://CLUSTER/NS) or `local`: the Ray "
        "head on this machine, which submit and preflight start if needed (default: "
        "$RAY_ADDRESS, else local)",
    )

    jobs = subparsers.add_parser("jobs", help="list, inspect, follow and stop Ray jobs")
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    p = sub.add_parser("list", parents=[address], help="every job on the cluster")
    p.add_argument("--run", help="only this run's jobs")
    p.set_defaults(func=_jobs_list)
    p = sub.add_parser(
        "watch", parents=[address], help="follow a run; resubmit it when its job fails"
    )
    p.add_argument("run", help="the run name (its newest job is followed)")
    p.add_argument("--resubmit", type=int, default=0, help="restarts allowed after failures")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between status checks")
    p.add_argument(
        "--stall-minutes",
        type=float,
        help="stop (and resubmit) a job with no new step line (no output before its first) this long",
    )
    p.set_defaults(func=_jobs_watch)
    for name, help_ in (
        ("status", "a job's status"),
        ("logs", "a job's output"),
        ("stop", "stop a job"),
    ):
        p = sub.add_parser(name, parents=[address], help=help_)
        p.add_argument("job", help="submission id (rlkit-RUN-N) or run name (its newest job)")
        if name == "logs":
            p.add_argument("--follow", action="store_true", help="stream until the job ends")
        p.set_defaults(func=_job)

    from rlkit.train.presets import PRESETS as LOCAL_PRESETS

    p = subparsers.add_parser(
        "submit", parents=[address], help="launch a GRPO run (a local or SkyRL preset) as a Ray job"
    )
    p.add_argument("--preset", required=True, choices=[*LOCAL_PRESETS, *PRESETS])
    p.add_argument("--run-name", help="run dir and job name (default: the preset name)")
    fields = []  # the flags that change the SkyRL preset field their dest names

    def field(flag: str, **kw) -> None:
        fields.append(p.add_argument(flag, **kw).dest)

    field("--nodes", type=int, help="GPU nodes (batch sizes scale with it)")
    field("--instance-type", help="HyperPod GPU instance, e.g. ml.g7e.24xlarge")
    field("--gpus-per-node", type=int, help="GPUs the run takes per node (default: all of them)")
    field(
        "--model",
        dest="model_path",
        metavar="MODEL",
        help="HF id or /fsx path of the starting model",
    )
    field("--logger", help="console, wandb, tensorboard or mlflow")
    field(
        "--runs-root",
        help="where run dirs go (SkyRL: shared storage, default /fsx/rlkit/runs; local: runs)",
    )
    field("--attention-backend", help="vLLM attention backend, e.g. TRITON_ATTN")
    field("--fsx-budget-gb", type=float, help="refuse a run whose /fsx estimate exceeds this")
    field(
        "--hang-minutes", type=int, help="HyperPod: a run with no step for this long hangs (0=off)"
    )
    field("--hang-action", choices=("notify", "cancel"), help="HyperPod's hang response")
    help_ = "forward an env var (masked; with --rayjob, through the run's Kubernetes Secret)"
    repeated(p, "--env", "NAME", help_)
    help_ = "change a preset field, e.g. steps=4 (SkyRLPreset) or grpo.lr=1e-4 (TrainConfig)"
    repeated(p, "--set", "FIELD=VALUE", help_)
    p.add_argument("--dry-run", action="store_true", help="print what would run; submit nothing")
    p.add_argument("--rayjob", metavar="FILE", help="write a KubeRay RayJob instead of submitting")
    p.add_argument("--backoff-limit", type=int, default=3, help="RayJob retries (new clusters)")
    p.add_argument(
        "--raycluster", metavar="FILE", help="write the KubeRay RayCluster sized for this preset"
    )
    p.add_argument(
        "--image",
        metavar="URI",
        help="the runtime image for --raycluster/--rayjob (deploy/build-image.sh prints it)",
    )
    p.set_defaults(func=_submit, skyrl_fields=fields)

    p = subparsers.add_parser(
        "preflight", parents=[address], help="check the cluster has what a run needs (a short job)"
    )
    p.add_argument("--preset", default="qwen3vl-8b", choices=sorted(PRESETS))
    p.add_argument("--model", help="HF id or /fsx path of the starting model")
    p.add_argument("--runs-root", help="shared storage for run dirs (default /fsx/rlkit/runs)")
    p.add_argument(
        "--gpu",
        action="store_true",
        help="also exercise the GPUs: NCCL all-reduce, flash-attn vs SDPA, vLLM sleep/wake",
    )
    p.set_defaults(func=_preflight)
