"""`make demo`: the workflow end to end on the embedded default, results in `runs/demo/`.

Builds the SkyRL-format datasets, draws the test set, evaluates the scripted baselines on it
(the oracle must solve everything; random sets the floor), and writes a summary JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rlkit.data import write_datasets
from rlkit.evaluate import evaluate
from rlkit.mazesets import test_set
from rlkit.policies import scripted_policy
from rlkit.render import RenderStyle, gallery, render_maze

BASELINES = ("oracle", "eps-oracle:0.25", "random")


def run_demo(out_dir: str | Path = "runs/demo", *, quick: bool = False) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train_path, eval_path = write_datasets(out / "data", 64 if quick else 256)
    style = RenderStyle(view="full", cell_px=16)
    gallery([render_maze(m, style) for m in test_set()], cols=8).save(out / "test_set.png")
    samples = 2 if quick else 8
    baselines = {}
    for name in BASELINES:
        result, trajs = evaluate(scripted_policy(name), samples=samples, seed=0)
        result.save(out / "evals" / f"{name.replace(':', '_')}.json", trajs)
        baselines[name] = {
            "solve_rate": result.solve_rate,
            "ci95": list(result.ci95),
            "failures": result.failures,
        }
    summary = {
        "datasets": [str(train_path), str(eval_path)],
        "gallery": str(out / "test_set.png"),
        "samples_per_maze": samples,
        "baselines": baselines,
        "wall_seconds": round(time.time() - t0, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
