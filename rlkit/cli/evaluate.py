"""`rlkit eval`: a scripted policy or any Qwen3-VL checkpoint (HF or vLLM) on a pinned set, by
rlkit's protocol or the seed's, or a SkyRL run's own eval read from its dumps. Usage: docs/cli.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.errors import UsageError

if TYPE_CHECKING:
    from rlkit.env.maze_env import EnvConfig


def load_policy(
    name: str,
    *,
    greedy: bool = False,
    device: str = "cpu",
    engine: str = "hf",
    constrained: bool = True,
    max_new_tokens: int = 24,
    **vllm_kw,
):
    """A scripted policy by name, or a model policy from a checkpoint dir on HF or vLLM
    (`vllm_kw`); free-form answers get `max_new_tokens`, checked to hold the canonical one."""
    from rlkit.episodes.policies import is_scripted, scripted_policy

    if is_scripted(name):
        return scripted_policy(name)
    if not Path(name).exists():
        raise UsageError(
            f"policy {name!r} is neither random|oracle|eps-oracle:E nor an existing model directory"
        )
    from rlkit.run import is_run, open_run

    if is_run(name):  # a run dir (either backend) holds many models: name a checkpoint's
        run = open_run(name)
        newest = [str(c.hf_export) for c in run.checkpoints() if c.hf_export is not None][-1:]
        backend = "SkyRL" if run.backend == "skyrl" else "local"
        raise UsageError(
            f"{name} is a {backend} run, not a model: evaluate one of its checkpoints, "
            + (f"e.g. --policy {newest[0]}" if newest else "once it has saved one")
        )
    answers = {"constrained": constrained, "max_new_tokens": max_new_tokens}
    if engine == "vllm":
        from rlkit.model.vllm_policy import load_vllm_policy

        policy = load_vllm_policy(name, greedy=greedy, **answers, **vllm_kw)
        tokenizer = policy.engine.tokenizer
    else:
        from rlkit.model.policy import load_policy as load_model_policy

        policy = load_model_policy(name, greedy=greedy, device=device, **answers)
        tokenizer = policy.loaded.tokenizer
    if not constrained:
        from rlkit.model.action_tag import check_answer_budget

        check_answer_budget(tokenizer, max_new_tokens, "--max-new-tokens")
    return policy


def checkpoint_of(path: str | Path) -> tuple[str, int] | None:
    """(run name, step) of a run checkpoint's model (RUN/global_step_N/policy, SkyRL's
    RUN/exports/global_step_N/policy, or the global_step_N dir itself); else None."""
    from rlkit.run.checkpoints import STEP_DIR

    p = Path(path).resolve()
    for d in (p, p.parent):
        if m := STEP_DIR.match(d.name):
            run = d.parent.parent if d.parent.name == "exports" else d.parent
            return run.name, int(m.group(1))
    return None


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlkit.episodes.evaluate import check_protocol, evaluate

    if args.dumps:
        from rlkit.run import run_eval

        result = run_eval(args.dumps, args.step, args.protocol)
        print(json.dumps(result.to_dict()) if args.json else result.summary())
        return 0
    sft = args.answer_format != "visgym" or args.prompt_file
    if args.address and sft:
        raise UsageError(
            "--answer-format and --prompt-file run here, not as a cluster job: drop --address"
        )
    from rlkit.env.maze_env import env_for_set
    from rlkit.env.visgym_text import answer_view
    from rlkit.episodes.policies import is_scripted

    cfg = None  # the set's own env, as before these options
    if sft or args.show_prompt:
        cfg = answer_view(env_for_set(args.set), args.answer_format, prompt_file=args.prompt_file)
    if args.show_prompt:
        return _show_prompt(args.policy, args.set, cfg)
    if args.answer_format == "visgym-sft" and (not args.free or is_scripted(args.policy or "")):
        raise UsageError(
            "--answer-format visgym-sft needs a model dir and --free: scripted and constrained "
            "answers are action tags"
        )
    if not args.policy:
        raise UsageError("rlkit eval needs --policy (or --dumps RUN for a SkyRL run's own evals)")

    if args.address and args.protocol == "seed":
        raise UsageError(
            "--protocol seed runs here, not as a cluster job: drop --address and point --policy "
            "at the export on /fsx (or read the run's own greedy evals: rlkit plot / notebook 04)"
        )
    if args.address:  # a GPU Ray job on the cluster, e.g. for a SkyRL HF export on /fsx
        from rlkit.cluster.launch import submit_eval

        if not args.out:
            raise UsageError("--address needs --out on shared storage (e.g. /fsx/.../eval.json)")
        handle = submit_eval(
            args.policy,
            args.out,
            address=args.address,
            set_name=args.set,
            samples=args.samples,
            device=args.device if args.device != "cpu" else "cuda",
            gpus=args.gpus,
            engine=args.engine,
            kv_cache_gb=args.kv_cache_gb,
            follow=True,
        )
        return 0 if handle.status() == "SUCCEEDED" else 1
    greedy = args.greedy or args.protocol == "seed"
    mode = "greedy" if greedy else "sampled"
    check_protocol(args.protocol, samples=args.samples, mode=mode, n_mazes=args.mazes)
    vllm_kw = {"set_name": args.set, "history": args.history, "kv_cache_gb": args.kv_cache_gb}
    answers = {"constrained": not args.free, "max_new_tokens": args.max_new_tokens}
    policy = load_policy(
        args.policy,
        greedy=greedy,
        device=args.device,
        engine=args.engine,
        **answers,
        **(vllm_kw if args.engine == "vllm" else {}),
    )
    checkpoint = None if is_scripted(args.policy) else checkpoint_of(args.policy)
    if checkpoint is not None:  # "local-tiny@204 on test", as a run's own evals are named
        run_name, step = checkpoint
        policy.name = f"{run_name}@{step}{':free' if args.free else ''}"
    result, trajs = evaluate(
        policy,
        set_name=args.set,
        samples=args.samples,
        seed=args.seed,
        history=args.history,
        progress=not args.json and sys.stderr.isatty(),
        mode=mode,
        n_mazes=args.mazes,
        protocol=args.protocol,
        cfg=cfg,
        step=checkpoint[1] if checkpoint else None,
    )
    if args.out:
        result.save(args.out, trajs)
    if args.json:  # without --full, no per-maze rows (those go to --out)
        d = result.to_dict()
        print(json.dumps(d if args.full else {k: v for k, v in d.items() if k != "per_maze"}))
    else:
        print(result.summary())
        if any(result.failures.values()):
            print("failures: " + ", ".join(f"{k}={v}" for k, v in result.failures.items()))
    return 0


def _show_prompt(policy: str | None, set_name: str, cfg: EnvConfig) -> int:
    """Print the set's first turn as the model sees it (through a model dir's chat template)."""
    from rlkit.env.maze_env import make_env
    from rlkit.maze.sets import pinned_set

    msgs, _ = make_env(pinned_set(set_name)[0], cfg).init()
    if policy and Path(policy).is_dir():
        from rlkit.model.load import template_text

        text, n_images = template_text(policy, msgs)
        print(text)
        print(f"({n_images} image(s) where the image pad stands; {cfg.parser} answers)")
        return 0
    for m in msgs:
        parts = [m["content"]] if isinstance(m["content"], str) else m["content"]
        print(f"[{m['role']}]")
        for part in parts:
            print(part if isinstance(part, str) else part.get("text", "[image]"))
    return 0


def add_eval_parser(sub: argparse._SubParsersAction, sets: str) -> None:
    """The `eval` subcommand's arguments (`sets`: the registry's set names, for the help)."""
    e = sub.add_parser("eval", help="evaluate a policy on a test set")
    e.add_argument("--policy", help="random | oracle | eps-oracle:E | MODEL_DIR")
    e.add_argument(
        "--dumps",
        help="instead of --policy: a SkyRL run (or its export dir); print its own eval of --step "
        "(default: the last) from its eval dumps, the seed's protocol when it ran greedy, 1 sample",
    )
    e.add_argument("--step", type=int, help="with --dumps: the evaluated step")
    e.add_argument("--set", default="test", help=f"a named test set: {sets}")
    e.add_argument("--samples", type=int, default=1, help="episodes per maze (k for pass@k)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--history", type=int, default=1, help="turns of history the model sees")
    e.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    e.add_argument(
        "--free",
        action="store_true",
        help="free-form answers (text, then <action>WORD</action>, as SkyRL samples) instead of "
        "the move word drawn among the four",
    )
    e.add_argument(
        "--max-new-tokens",
        type=int,
        default=24,
        help="with --free: answer budget in tokens (must hold the canonical answer)",
    )
    e.add_argument("--mazes", type=int, help="only the set's first N mazes")
    e.add_argument(
        "--protocol",
        default="rlkit",
        choices=["rlkit", "seed"],
        help="rlkit: k sampled episodes a maze, maze-clustered interval; seed: the seed's "
        "protocol (every maze, greedy, one sample: '28/64 = 43.75%%', exact interval)",
    )
    e.add_argument(
        "--answer-format",
        default="visgym",
        choices=["visgym", "visgym-sft"],
        help="squares sets: SkyRL's <action>up</action> or VisGym's ('move', 0) (SFT checkpoints)",
    )
    e.add_argument("--prompt-file", help="squares sets: a text file replacing rlkit's rules")
    e.add_argument(
        "--show-prompt",
        action="store_true",
        help="print the first turn as the model sees it (its chat template with a model dir)",
    )
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--full", action="store_true", help="with --json: include per-maze rows")
    e.add_argument("--out", help="write the JSON and trajectories JSONL here")
    e.add_argument("--device", default="cpu", help="torch device for a model policy (cuda on GPUs)")
    e.add_argument(
        "--address", help="run the evaluation as a GPU Ray job on this cluster (SkyRL exports)"
    )
    e.add_argument("--gpus", type=float, default=1, help="with --address: GPUs for the job")
    e.add_argument(
        "--engine",
        default="hf",
        choices=["hf", "vllm"],
        help="inference engine for a model policy: HF generate (default) or vLLM (same results)",
    )
    e.add_argument(
        "--kv-cache-gb",
        type=float,
        help="with --engine vllm: KV cache GiB (default 1 on CPU, 85%% of a GPU's memory)",
    )
    e.set_defaults(func=_cmd_eval)
