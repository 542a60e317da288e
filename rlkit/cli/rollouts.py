"""`rlkit rollouts RUN`: the training rollouts a local or SkyRL run captured per step, listed, shown
episode by episode or exported as an HTML player (`--address`: read on the cluster). Usage: docs/cli.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlkit.errors import RlkitError, UsageError

MOVE_LETTER = {"up": "U", "down": "D", "left": "L", "right": "R"}
ALL_STEPS = 10**6
"""More captured steps than any run keeps (`capture_keep`): a reading job brings them all."""


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("rollouts", help="list or export the training rollouts a run captured")
    r.add_argument("run", help="a local or SkyRL run dir")
    r.add_argument("--step", help="a captured step, or latest: its episodes")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument(
        "--export",
        metavar="FILE.html",
        help="write the step (default: latest) as a kernel-free HTML player",
    )
    r.add_argument(
        "--address",
        help="read RUN where the cluster's jobs see it (a Ray job there), e.g. /fsx from Studio",
    )
    r.set_defaults(func=cmd_rollouts)


def _open(args: argparse.Namespace, captured: int):
    from rlkit.run import is_run, open_run

    path = args.run
    if args.address is not None:  # notes go to stderr, so --json stays one object
        from rlkit.cli.cluster import cli_connect
        from rlkit.run.remote import read_run

        return read_run(cli_connect(args), path, captured=captured)
    run = open_run(path)  # a missing path: one line (RunNotFound)
    if not is_run(run.path):
        raise UsageError(
            f"{path} is not a run dir (no run.json, no SkyRL layout): give the --run-dir "
            "a training wrote"
        )
    if run.capture_root() is None:
        raise UsageError(
            f"{run.path} is a SkyRL export dir without its run dir: captured rollouts are in "
            "the run dir (RUN/rollouts), give that"
        )
    return run


def cmd_rollouts(args: argparse.Namespace) -> int:
    from rlkit.run.captures import summarize

    listing = args.step is None and args.export is None
    latest_only = not listing and args.step in (None, "latest")
    # through the cluster, the reading job brings the newest step, or every step kept
    run = _open(args, captured=1 if latest_only else ALL_STEPS)
    steps = run.capture_steps()
    if not steps:
        raise UsageError(
            f"{run.path} has no captured training rollouts yet: they are written after each "
            "GRPO step (capture is off when schedule.capture_groups is 0)"
        )
    if listing:
        rows, skipped = [], []
        for s in steps:
            try:
                rows.append(summarize(run.captures(s), s))
            except UsageError:
                raise
            except RlkitError as e:  # a damaged step file: list the others, say which and why
                skipped.append({"step": s, "error": str(e)})
                print(f"warning: step {s} skipped: {e}", file=sys.stderr)
        listed = {"run": run.name, "backend": run.backend, "steps": [r.to_dict() for r in rows]}
        if skipped:
            listed["skipped"] = skipped
        print(json.dumps(listed) if args.json else _steps_table(run.name, rows))
        return 0
    try:
        step = steps[-1] if latest_only else int(args.step)
    except ValueError:
        raise UsageError(f"--step {args.step!r}: give a step number or latest") from None
    episodes = sorted(run.captures(step), key=lambda e: (e.group, e.trajectory.sample))
    if args.export:
        from rlkit.notebook.rollouts import step_html

        out = Path(args.export)
        if out.suffix.lower() not in (".html", ".htm"):
            raise UsageError(f"--export {out}: give an .html file")
        if not episodes:
            raise UsageError(f"step {step} of {run.name} captured no episodes: nothing to export")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(step_html(run.name, step, episodes), encoding="utf-8")
    if args.json:
        extra = {"export": args.export} if args.export else {}
        print(json.dumps({**_step_dict(run, step, episodes), **extra}))
    elif args.export:
        print(f"wrote {args.export}: {len(episodes)} episodes of step {step}")
    else:
        print(_step_table(run.name, step, episodes))
    return 0


def _steps_table(name: str, rows) -> str:
    lines = [
        f"{name}: {len(rows)} captured steps",
        f"{'step':>6} {'episodes':>8} {'groups':>6} {'solved':>7} {'mean adv':>9} {'turns':>6}",
    ]
    lines += [
        f"{r.step:>6} {r.episodes:>8} {r.groups:>6} {100 * r.solve_rate:>6.1f}% "
        f"{r.mean_advantage:>+9.3f} {r.turns_mean:>6.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def p_chosen(turn) -> float | None:
    """The policy's probability of the move it made this turn (None: not recorded or no move)."""
    from rlkit.maze.core import Action

    word = turn.actions[0].upper() if turn.actions else ""
    if turn.move_probs is None or word not in Action.__members__:  # `stop`: not one of the bars
        return None
    return float(turn.move_probs[Action[word].value])


def _moves(traj) -> list[str]:
    return [t.actions[0] if t.actions else "?" for t in traj.turns]


def _step_dict(run, step: int, episodes) -> dict:
    from rlkit.run.captures import summarize

    return {
        "run": run.name,
        "backend": run.backend,
        "step": step,
        "summary": summarize(episodes, step).to_dict(),
        "episodes": [
            {
                "group": e.group,
                "sample": e.trajectory.sample,
                "reward": e.trajectory.reward,
                "advantage": e.advantage,
                "solved": e.trajectory.solved,
                "turns": len(e.trajectory.turns),
                "moves": _moves(e.trajectory),
                "p_chosen": [p_chosen(t) for t in e.trajectory.turns],
                "move_probs": [
                    None if t.move_probs is None else list(t.move_probs) for t in e.trajectory.turns
                ],
            }
            for e in episodes
        ],
    }


def _step_table(name: str, step: int, episodes) -> str:
    from rlkit.run.captures import summarize

    lines = [
        f"{name}, {summarize(episodes, step).line()}",
        f"{'group':>5} {'sample':>6} {'reward':>6} {'adv':>7} {'turns':>5}  moves / P(chosen move)",
    ]
    for e in episodes:
        t = e.trajectory
        moves = " ".join(MOVE_LETTER.get(m, m) for m in _moves(t))
        probs = " ".join("-" if p is None else f"{p:.2f}" for p in map(p_chosen, t.turns))
        lines.append(
            f"{e.group:>5} {t.sample:>6} {t.reward:>6g} {e.advantage:>+7.3f} {len(t.turns):>5}  "
            f"{moves}"
        )
        lines.append(f"{'':>35}{probs}")
    lines.append("moves: U D L R (? = no parsable move); P: - = not recorded")
    return "\n".join(lines)
