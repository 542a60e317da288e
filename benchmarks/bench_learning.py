"""Does the tiny Qwen3-VL learn? The `local-tiny` preset's held-out curve, and the target.

    python benchmarks/bench_learning.py [--run-dir runs/bench-learning] [--seed 0] [--set k=v ...]

Trains (or resumes) the `local-tiny` preset, then prints the held-out 64-maze solve rate at
every evaluated checkpoint: step, phase, training wall time, episodes seen, solve rate with its
maze-clustered 95% interval (`rlkit.stats.CI_METHOD`), next to the target (<= 50% at the first GRPO checkpoint, >= 90% within 20
minutes of training on 2 CPU cores). Writes the curve to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlkit.episodes.evaluate import EvalResult
from rlkit.notebook.plots import figure_png, load_run_evals, solve_rate_curve
from rlkit.train.config import preset
from rlkit.train.runs import RunDir
from rlkit.train.trainer import train

TARGET_START, TARGET_END, BUDGET_S = 0.50, 0.90, 20 * 60


def curve(run_dir: Path) -> tuple[list[dict], int | None]:
    run = RunDir(run_dir)
    records = run.read_metrics()
    elapsed, episodes, ws_end = {}, {}, None
    total = 0
    for r in records:
        if "rollout/episodes" in r:
            total += r["rollout/episodes"]
        if "timing/elapsed_s" in r:
            elapsed[r["step"]] = r["timing/elapsed_s"]
            episodes[r["step"]] = total
        if r.get("train/phase") == "warm_start" and "loss/bc" in r:
            ws_end = r["step"]
    rows = []
    for step in run.eval_steps():
        e = EvalResult.from_dict(run.read_eval(step)).to_dict()  # old files: intervals redone
        rows.append(
            {
                "step": step,
                "phase": "init"
                if step == 0
                else "warm_start"
                if ws_end and step <= ws_end
                else "grpo",
                "train_s": round(elapsed.get(step, 0.0), 1),
                "episodes": episodes.get(step, 0),
                "solve_rate": e["solve_rate"],
                "ci95": e["ci95"],
                "ci_method": e["ci_method"],
                "samples": e["samples"],
                "mode": e["mode"],
            }
        )
    return rows, ws_end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/bench-learning")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    cfg = preset("local-tiny").with_overrides({"schedule.seed": args.seed, **overrides})
    t0 = time.time()
    train(cfg, args.run_dir)
    wall = time.time() - t0
    rows, ws_end = curve(Path(args.run_dir))
    print(
        f"\nlocal-tiny, seed {args.seed}: held-out 64-maze set, {rows[-1]['samples']} {rows[-1]['mode']} samples/maze"
    )
    print(f"{'step':>5} {'phase':>10} {'train s':>8} {'episodes':>9} {'solve':>7} {'95% CI':>15}")
    for r in rows:
        lo, hi = r["ci95"]
        print(
            f"{r['step']:5d} {r['phase']:>10} {r['train_s']:8.0f} {r['episodes']:9d} {r['solve_rate']:7.1%} [{lo:5.1%}, {hi:5.1%}]"
        )
    first = next((r for r in rows if r["phase"] != "init" and r["step"] >= (ws_end or 0)), rows[0])
    in_budget = [r for r in rows if r["train_s"] <= BUDGET_S]
    best = max(in_budget, key=lambda r: r["solve_rate"]) if in_budget else rows[-1]
    print(f"\n{'':24s} {'measured':>10s} {'target':>10s}")
    print(f"{'first GRPO checkpoint':24s} {first['solve_rate']:10.1%} {'<= 50%':>10s}")
    print(
        f"{'best within 20 min':24s} {best['solve_rate']:10.1%} {'>= 90%':>10s}   (step {best['step']}, {best['train_s']:.0f} s)"
    )
    print(f"{'final':24s} {rows[-1]['solve_rate']:10.1%}   wall incl. evals {wall:.0f} s")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    name = f"learning_local_tiny_seed{args.seed}"
    (out / f"{name}.json").write_text(
        json.dumps(
            {
                "seed": args.seed,
                "overrides": overrides,
                "warm_start_end": ws_end,
                "wall_s": round(wall),
                "curve": rows,
            },
            indent=1,
        )
        + "\n"
    )
    fig = solve_rate_curve(
        load_run_evals(args.run_dir), warm_start_end=ws_end, run_id=f"local-tiny seed {args.seed}"
    )
    (out / f"{name}.png").write_bytes(figure_png(fig))


if __name__ == "__main__":
    main()
