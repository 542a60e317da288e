"""Each GRPO lever against the same start: which of them moves the final greedy solve rate?

    python benchmarks/bench_levers.py --preset local-tiny-visgym --seed 0
    python benchmarks/bench_levers.py --preset local-tiny-visgym --seed 0 --levers squares gigpo
    python benchmarks/bench_levers.py --preset local-tiny --seed 1 --set schedule.steps=80

Runs the preset's warm start once (RUN_ROOT/seedN/warm; its policy at the switch is
RUN/reference_policy), then the GRPO phase of each lever from that policy with the same seed,
steps and recipe but the lever's switches (`LEVERS`), one run after the other (a run already
there is resumed). Each final checkpoint plays the eval set by the seed's protocol (greedy, one
episode a maze) and is compared with the baseline paired by maze (`rlkit.episodes.evaluate.
compare`: the difference with its 95% interval and the sign-flip p-value). The report covers
every lever whose run is on disk, so levers may train in separate processes. Writes
`benchmarks/results/levers_{preset}_seed{N}[_{tag}].json` and prints a table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_learning import RESULTS, machine

from rlkit.episodes.evaluate import compare
from rlkit.notebook.workbench import final_greedy_eval
from rlkit.run.rundir import RunDir
from rlkit.train.presets import preset
from rlkit.train.trainer import train

LEVERS: dict[str, dict] = {
    "baseline": {},
    "curriculum": {"recipe.curriculum_steps": 60},
    "gigpo": {"recipe.advantage_estimator": "gigpo"},
    "squares": {"grpo.aux_weight": 1.0},
    "hard": {"grpo.hard_share": 0.5},
    "curriculum+hard": {"recipe.curriculum_steps": 60, "grpo.hard_share": 0.5},
}
"""Each lever's switches on top of the preset: the difficulty curriculum (rlkit's, over the first
half of the default 120 steps), GiGPO's step-level credit, the warm start's per-square loss
kept through GRPO, half of each step's mazes drawn among long-path ones (`grpo.hard_share`),
and the two levers that moved the seed's task most, together."""


def warm_start(preset_name: str, seed: int, root: Path, sets: dict) -> Path:
    """The preset's warm start for `seed` (and one GRPO step): its policy at the switch."""
    run_dir = root / f"seed{seed}" / "warm"
    start = run_dir / "reference_policy"
    if not (start / "config.json").exists():
        cfg = preset(preset_name).with_overrides(
            {"schedule.seed": seed, **sets, "schedule.steps": 1}
        )
        train(cfg, run_dir)
    return start


def lever_run(preset_name: str, seed: int, root: Path, lever: str, start: Path, sets: dict) -> Path:
    run_dir = root / f"seed{seed}" / lever
    overrides = {
        "schedule.seed": seed,
        **sets,
        **LEVERS[lever],
        "model.init": str(start),
        "warm_start.enabled": False,
        "schedule.eval_before_train": False,
    }
    train(preset(preset_name).with_overrides(overrides), run_dir)
    return run_dir


def train_seconds(run_dir: Path) -> float:
    rows = [r for r in RunDir(run_dir).read_metrics() if "timing/elapsed_s" in r]
    return round(rows[-1]["timing/elapsed_s"], 1) if rows else 0.0


def first_step_at(run_dir: Path, rate: float = 0.95) -> int | None:
    """The first GRPO step whose sampled eval reached `rate` (None: never)."""
    rows = RunDir(run_dir).read_metrics()
    return next((r["step"] for r in rows if r.get("eval/solve_rate", 0.0) >= rate), None)


def report(root: Path, seed: int) -> dict:
    """Every lever on disk: final greedy, paired against the baseline."""
    runs = {n: root / f"seed{seed}" / n for n in LEVERS}
    runs = {n: d for n, d in runs.items() if (d / "run.json").exists()}
    results = {n: final_greedy_eval(d) for n, d in runs.items()}
    base = results.get("baseline")
    out = {}
    for name, r in results.items():
        row = {
            "switches": LEVERS[name],
            "step": r.step,
            "greedy": r.solve_rate,
            "solved": round(r.solve_rate * r.n_mazes),
            "mazes": r.n_mazes,
            "ci95": list(r.ci95),
            "train_s": train_seconds(runs[name]),
            "first_step_at_95": first_step_at(runs[name]),
            "git_sha": json.loads((runs[name] / "run.json").read_text()).get("git_sha"),
        }
        if base is not None and name != "baseline":
            p = compare(base, r)
            row["vs_baseline"] = {
                "diff": p.diff,
                "ci95": list(p.ci95),
                "p_value": p.p_value,
                "ahead": p.b_better,
                "behind": p.a_better,
            }
        out[name] = row
    return out


def table(rows: dict) -> str:
    lines = [
        "| lever | final greedy | 95% interval | vs baseline, paired by maze | p | 95% sampled at |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lo, hi = r["ci95"]
        vs, paired, p = r.get("vs_baseline"), "-", "-"
        if vs:
            a, b = (100 * x for x in vs["ci95"])
            paired = (
                f"{100 * vs['diff']:+.1f} pts [{a:+.1f}, {b:+.1f}], +{vs['ahead']}/-{vs['behind']}"
            )
            p = f"{vs['p_value']:.3g}"
        rate = f"{r['solved']}/{r['mazes']} = {r['greedy']:.1%}"
        at = f"step {r['first_step_at_95']}" if r["first_step_at_95"] else "never"
        lines.append(f"| {name} | {rate} | [{lo:.1%}, {hi:.1%}] | {paired} | {p} | {at} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", default="local-tiny-visgym")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--levers", nargs="*", choices=list(LEVERS), default=list(LEVERS))
    ap.add_argument("--run-root", type=Path, default=Path("runs/bench_levers"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--tag", default="", help="suffix of the results file: one per comparison")
    args = ap.parse_args()
    sets = dict(item.split("=", 1) for item in args.set)
    root = args.run_root / args.preset
    if not args.report_only:
        start = warm_start(args.preset, args.seed, root, sets)
        for lever in args.levers:
            lever_run(args.preset, args.seed, root, lever, start, sets)
    rows = report(root, args.seed)
    out = {"preset": args.preset, "seed": args.seed, "sets": sets, "machine": machine()}
    out["levers"] = rows
    tag = f"_{args.tag}" if args.tag else ""
    name = f"levers_{args.preset.replace('-', '_')}_seed{args.seed}{tag}.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
