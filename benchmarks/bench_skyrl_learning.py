"""Does the cluster's recipe learn? SkyRL's whole trainer on CPU, then rlkit's local trainer on
the same episode budget, each from the same warm-started model.

    python benchmarks/bench_skyrl_learning.py                      # ~45 min on 2 cores
    python benchmarks/bench_skyrl_learning.py --skyrl-run RUN      # report a finished run
    python benchmarks/bench_skyrl_learning.py --steps 8 --eval-every 4 --no-local   # a rehearsal

SkyRL side: `rlkit submit --preset skyrl-tiny-cpu --address local` with 16 mazes x 8 episodes a
step (128 episodes), its recipe as the preset has it (GRPO, sequence_mean, k3 KL 0.005,
lr 3e-4 falling along a cosine to 0 at the last step, free-form answers), evaluated on the 64
`test` mazes x 4 samples before training and every `--eval-every` steps. Local side: `rlkit train --preset local-tiny` from the SkyRL run's
RUN/init_model (no warm start of its own), the same mazes a step, group size, and the
preset's lr and its schedule, KL coefficient and loss reduction, no zero-variance filter and no fail advantage (SkyRL has
neither), for the same number of episodes; its own answer mode (the tiny model's one-token
move), so the comparison is of the two trainers as each is used.

Prints, for each backend, start / best / final solve rate with maze-clustered 95% intervals,
the paired-by-maze test final vs start, points gained per 1,000 training episodes, and for
SkyRL turns/s and the mean wall time of each step phase; then the two gains' ratio. Writes
`benchmarks/results/skyrl_learning.{json,png}`. Target: SkyRL final ahead of start by >= 15
points with paired p < 0.01 (`TARGET_POINTS`, `TARGET_P`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rlkit.cluster.skyrl.presets import get_preset
from rlkit.episodes.evaluate import EvalResult, compare
from rlkit.notebook.plots import figure_png, solve_rate_curve
from rlkit.run import open_run
from rlkit.run.skyrl_layout import latest_step
from rlkit.train.presets import preset
from rlkit.train.trainer import train

TARGET_POINTS, TARGET_P = 15.0, 0.01
MAZES, GROUP = 16, 8
"""A step's batch on both backends: 16 mazes x 8 episodes."""
EVAL_MAZES, EVAL_SAMPLES = 64, 4
HEALTH = (
    "rollout/parse_errors",
    "rollout/placeholder_desyncs",
    "rollout/tokens_per_turn_mean",
    "rollout/tokens_per_turn_max",  # the cap (max_generate_length) reached: an answer was cut
    "loss/entropy",
    "loss/rollout_train_logprobs_abs_diff_mean",
)
"""Signals a long run may drift on (answers cut or malformed, placeholder desyncs, the
rollout-vs-trainer logprob gap), reported as the means of the first and last 5 steps."""
PHASES = ("generate", "fwd_logprobs_values_reward", "policy_train", "sync_weights", "step")
RESULTS = Path(__file__).parent / "results"
SKY = get_preset("skyrl-tiny-cpu")


def skyrl_run(root: Path, steps: int, eval_every: int) -> Path:
    """Submit the CPU preset on the local head and wait until its last eval is read."""
    sets = {
        "steps": steps,
        "prompts_per_node": MAZES,
        "group_size": GROUP,
        "eval_mazes": EVAL_MAZES,
        "eval_samples": EVAL_SAMPLES,
        "eval_interval": eval_every,
        "ckpt_interval": steps,
    }
    argv = ["submit", "--preset", "skyrl-tiny-cpu", "--address", "local", "--run-name", "learn"]
    argv += ["--runs-root", str(root)] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    subprocess.run([sys.executable, "-m", "rlkit.cli.main", *argv], check=True)
    run = root / "learn"
    while latest_step(run) != steps or steps not in open_run(run).evals():
        time.sleep(15)
    return run


def local_run(skyrl: Path, out: Path, steps: int, eval_every: int) -> Path:
    """rlkit's trainer from the SkyRL run's init model, on the same episode budget."""
    cfg = preset("local-tiny").with_overrides(
        {
            "model.init": str(skyrl / "init_model"),
            "warm_start.enabled": False,
            "grpo.mazes_per_step": MAZES,
            "grpo.group_size": GROUP,
            "grpo.epochs": 1,
            "grpo.minibatch": MAZES * GROUP * 64,  # one optimizer step a batch, as SkyRL's
            "grpo.lr": SKY.batch.lr,
            "grpo.lr_late": None,
            # SkyRL's cosine (lr -> 0 over the run) is the local half cosine from step 0
            "grpo.lr_late_from": 0,
            "grpo.lr_end": 0.0 if SKY.batch.lr_schedule == "cosine" else None,
            "recipe.kl_loss_coef": SKY.recipe.kl_loss_coef,
            "recipe.loss_reduction": SKY.recipe.loss_reduction,
            "recipe.zero_variance_filter": False,
            "recipe.fail_advantage": None,
            "schedule.steps": steps,
            "schedule.eval_every": eval_every,
            "schedule.eval_samples": EVAL_SAMPLES,
            "schedule.ckpt_every": steps,
        }
    )
    print(f"local trainer from {skyrl / 'init_model'}")
    train(cfg, out, progress=True)
    return out


def curve(run: Path) -> dict[int, EvalResult]:
    evals = open_run(run).evals()
    return {s: e for s, e in sorted(evals.items()) if e.n_mazes == EVAL_MAZES}


def report(name: str, run: Path, evals: dict[int, EvalResult], episodes_a_step: int) -> dict:
    steps = sorted(evals)
    start, final = evals[steps[0]], evals[steps[-1]]
    best = max(steps, key=lambda s: evals[s].solve_rate)
    paired = compare(start, final)
    gained = (final.solve_rate - start.solve_rate) * 100
    episodes = (steps[-1] - steps[0]) * episodes_a_step
    out = {
        "backend": name,
        "run": str(run),
        "curve": [
            {"step": s, "solve_rate": e.solve_rate, "ci95": list(e.ci95)} for s, e in evals.items()
        ],
        "start": {"step": steps[0], "solve_rate": start.solve_rate, "ci95": list(start.ci95)},
        "best": {
            "step": best,
            "solve_rate": evals[best].solve_rate,
            "ci95": list(evals[best].ci95),
        },
        "final": {"step": steps[-1], "solve_rate": final.solve_rate, "ci95": list(final.ci95)},
        "paired_final_vs_start": {
            "diff": paired.diff,
            "ci95": list(paired.ci95),
            "p": paired.p_value,
        },
        "episodes": episodes,
        "points_per_1000_episodes": gained / episodes * 1000 if episodes else 0.0,
        "verdict": paired.verdict("start", "final"),
    }
    print(f"\n{name}: {len(steps)} evals on {EVAL_MAZES} mazes x {EVAL_SAMPLES}")
    for key in ("start", "best", "final"):
        r = out[key]
        lo, hi = r["ci95"]
        print(f"  {key:5s} step {r['step']:3d}: {r['solve_rate']:.1%} [{lo:.1%}, {hi:.1%}]")
    print(f"  {out['verdict']}")
    print(
        f"  {gained:+.1f} points over {episodes} episodes: "
        f"{out['points_per_1000_episodes']:+.2f} points / 1,000 episodes"
    )
    return out


def skyrl_timing(run: Path) -> dict:
    records = [r for r in open_run(run).metrics() if "timing/step" in r]
    out = {p: statistics.mean(r.get(f"timing/{p}", 0.0) for r in records) for p in PHASES}
    turns = sum(r.get("rollout/turns_mean", 0.0) * MAZES * GROUP for r in records)
    generate = sum(r.get("timing/generate", 0.0) for r in records)
    out |= {"steps": len(records), "turns_per_s": turns / generate if generate else 0.0}
    out["train_wall_s"] = sum(r["timing/step"] for r in records)
    timed = sum(r.get("rollout/timed_turns", 0) for r in records)
    if timed:  # a turn's mean latency in each phase (rlkit.cluster.skyrl.generator.PHASES)
        out["turn_latency_s"] = {
            ph: sum(r.get(f"rollout/seconds_{ph}", 0.0) for r in records) / timed
            for ph in ("render", "engine", "env")
        }
        print(
            "  a turn's latency: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in out["turn_latency_s"].items())
        )
    for key in HEALTH:  # what a longer run may expose, first steps against last
        values = [r[key] for r in records if key in r]
        if values:
            out[key] = {
                "first5": statistics.mean(values[:5]),
                "last5": statistics.mean(values[-5:]),
            }
            print(
                f"  {key}: first 5 steps {out[key]['first5']:.3f}, last 5 {out[key]['last5']:.3f}"
            )
    print(
        f"  SkyRL: {out['steps']} steps, {out['train_wall_s'] / 60:.1f} min of steps; mean s a "
        + ", ".join(f"{p} {out[p]:.1f}" for p in PHASES)
        + f"; {out['turns_per_s']:.1f} turns/s in generate"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skyrl-run", type=Path, help="a finished run of this benchmark")
    ap.add_argument("--root", type=Path, default=Path("runs/bench-skyrl-learning"))
    ap.add_argument("--steps", type=int, default=80, help="GRPO steps (~20 s each here)")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--no-local", action="store_true", help="SkyRL only")
    ap.add_argument("--local-run", type=Path, help="a finished local run of this benchmark")
    ap.add_argument(
        "--name", default="skyrl_learning", help="results file stem (a repeat keeps the others)"
    )
    args = ap.parse_args()
    run = args.skyrl_run or skyrl_run(args.root, args.steps, args.eval_every)
    evals = curve(run)
    sky = report("SkyRL", run, evals, MAZES * GROUP)
    sky["timing"] = skyrl_timing(run)
    result = {"skyrl": sky, "target": {"points": TARGET_POINTS, "p": TARGET_P}}
    sky["met"] = sky["paired_final_vs_start"]["diff"] * 100 >= TARGET_POINTS and (
        sky["paired_final_vs_start"]["p"] < TARGET_P
    )
    if not args.no_local:
        local = args.local_run or local_run(run, args.root / "local", max(evals), args.eval_every)
        result["local"] = report("local", local, curve(local), MAZES * GROUP)
        a, b = sky["points_per_1000_episodes"], result["local"]["points_per_1000_episodes"]
        result["ratio_skyrl_over_local"] = a / b if b else None
        print(
            f"\npoints / 1,000 episodes: SkyRL {a:+.2f} | local {b:+.2f} | SkyRL / local "
            + (f"{a / b:.2f}" if b else "n/a")
        )
    print(
        f"target: SkyRL final - start >= {TARGET_POINTS:.0f} points, p < {TARGET_P}: "
        + ("met" if sky["met"] else "NOT met")
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    fig = solve_rate_curve(evals, run_id="SkyRL on CPU (skyrl-tiny-cpu)")
    (RESULTS / f"{args.name}.png").write_bytes(figure_png(fig))
    print(f"wrote {RESULTS / args.name}.json and .png")


if __name__ == "__main__":
    main()
