"""rlkit's local GRPO step against SkyRL's on the same mazes and group size, on this CPU.

    python benchmarks/bench_skyrl_step.py                   # runs SkyRL's CPU preset first
    python benchmarks/bench_skyrl_step.py --skyrl-run RUN   # reads a finished skyrl-tiny-cpu run

SkyRL side: `rlkit submit --preset skyrl-tiny-cpu --address local` (SkyRL's own trainer: FSDP2
on 2 ranks, its vLLM servers and router, delta weight sync), `--steps` GRPO steps; a step's
time is SkyRL's `timing/step` without its checkpoint and HF export saves. Local side: rlkit's
trainer from the same warm-started model (RUN/init_model), the same mazes per step and group
size, no warm start, no evals; a step's time is its rollout + encode + update. The first step
of each is left out (start-up). Prints both means and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlkit.cluster.skyrl.presets import get_preset
from rlkit.run.rundir import RunDir
from rlkit.run.skyrl_layout import latest_step
from rlkit.train.presets import preset
from rlkit.train.trainer import train

LOCAL_STEP = ("timing/rollout", "timing/encode", "timing/update")
SKYRL_SAVES = ("timing/save_checkpoints", "timing/save_hf_model")


def skyrl_run(root: Path, steps: int) -> Path:
    """Submit the CPU preset on the local head and wait for it to finish."""
    argv = ["submit", "--preset", "skyrl-tiny-cpu", "--address", "local", "--run-name", "bench"]
    argv += ["--runs-root", str(root), "--set", f"steps={steps}", "--set", f"ckpt_interval={steps}"]
    argv += ["--set", f"eval_interval={steps}"]
    subprocess.run([sys.executable, "-m", "rlkit.cli.main", *argv], check=True)
    run = root / "bench"
    while latest_step(run) != steps:
        time.sleep(5)
    return run


def step_times(run_dir: Path, parts: tuple[str, ...], minus: tuple[str, ...] = ()) -> list[float]:
    out = []
    for r in sorted(RunDir(run_dir).read_metrics(), key=lambda r: r["step"]):
        if all(k in r for k in parts):
            out.append(sum(r[k] for k in parts) - sum(r.get(k, 0.0) for k in minus))
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skyrl-run", type=Path, help="a finished skyrl-tiny-cpu run dir")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    sky = get_preset("skyrl-tiny-cpu")
    with tempfile.TemporaryDirectory() as tmp:
        run = args.skyrl_run or skyrl_run(Path(tmp), args.steps)
        skyrl = step_times(run, ("timing/step",), SKYRL_SAVES)
        cfg = preset("local-tiny").with_overrides(
            {
                "model.init": str(run / "init_model"),
                "warm_start.enabled": False,
                "grpo.mazes_per_step": sky.batch.prompts_per_node * sky.layout.nodes,
                "grpo.group_size": sky.batch.group_size,
                "schedule.steps": len(skyrl) + 1,
                "schedule.eval_every": 10_000,
                "schedule.ckpt_every": 10_000,
            }
        )
        train(cfg, Path(tmp) / "local", progress=False)
        local = step_times(Path(tmp) / "local", LOCAL_STEP)
    a, b = statistics.mean(local), statistics.mean(skyrl)
    print(
        f"GRPO step, {cfg.grpo.mazes_per_step} mazes x group {cfg.grpo.group_size}: "
        f"rlkit local {a:.2f} s ({len(local)} steps) | SkyRL on CPU {b:.2f} s ({len(skyrl)} steps)"
        f" | SkyRL / local {b / a:.1f}x"
    )


if __name__ == "__main__":
    main()
