"""A Studio kernel that only drives the cluster needs no torch: `rlkit[cluster,notebook]`.

Each step runs in a fresh interpreter where importing torch, torchvision or transformers fails:
the dry-run submit, the jobs listing and `connect` against a real local Ray head, reading a
SkyRL run (its checkpoints and SkyRL's own eval dumps) and plotting it, and the workbench steps
of notebooks 00-02 that need no model (the kernel report, the mazes, the scripted baselines).
Notebooks import the workbench in their first cell, so this also keeps their start fast.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test is a fresh interpreter

BLOCK = (
    "import sys\nfor m in ('torch', 'torchvision', 'transformers'):\n    sys.modules[m] = None\n"
)


def run_without_torch(code: str, tmp_path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def cli(*argv: str) -> str:
    return f"from rlkit.cli.main import main\nassert main({list(argv)!r}) == 0\n"


def test_submit_dry_run_without_torch(tmp_path):
    out = run_without_torch(cli("submit", "--preset", "qwen3vl-8b-6gpu", "--dry-run"), tmp_path)
    assert "python -m rlkit.cluster.skyrl.entry" in out


def test_jobs_and_connect_without_torch(tmp_path, ray_cluster):
    code = cli("jobs", "list", "--address", ray_cluster.address) + textwrap.dedent(f"""
        from rlkit.cluster.client import connect
        print(connect({ray_cluster.address!r}).summary())
    """)
    run_without_torch(code, tmp_path)


def test_skyrl_run_reads_and_plots_without_torch(tmp_path, skyrl_eval):
    cfg, metrics = skyrl_eval
    run_dir = cfg.trainer.ckpt_path
    code = textwrap.dedent(f"""
        from rlkit.run.skyrl_dumps import read_eval_dumps
        from rlkit.run.skyrl_layout import list_checkpoints
        from rlkit.notebook.plots import figure_png, solve_rate_curve
        evals = read_eval_dumps({cfg.trainer.export_path!r})
        print(list_checkpoints({run_dir!r}))
        assert figure_png(solve_rate_curve(evals)).startswith(b"\\x89PNG")
        print(evals[10].solve_rate)
    """) + cli("plot", "--run-dir", run_dir, "--out", str(tmp_path / "solve.png"))
    out = run_without_torch(code, tmp_path)
    assert float(out.splitlines()[1]) == metrics["eval/all/avg_score"]
    assert (tmp_path / "solve.png").read_bytes().startswith(b"\x89PNG")


def test_workbench_steps_without_a_model_need_no_torch(tmp_path):
    code = textwrap.dedent(f"""
        from rlkit.maze.sets import pinned_set
        from rlkit.notebook import baselines, plots, workbench
        from rlkit.notebook.widgets import MazeBrowser, maze_view
        assert workbench.kernel_report()["ray"] != "missing"
        png = plots.figure_png(plots.maze_gallery(pinned_set("test")[:4]))
        assert png.startswith(b"\\x89PNG")
        MazeBrowser(size=5)
        maze_view(5, seed=0)
        evals = baselines.baseline_evals({str(tmp_path)!r}, "local-tiny", samples=1, policies=("oracle",))
        print(evals["oracle"].solve_rate)
    """)
    assert float(run_without_torch(code, tmp_path).splitlines()[-1]) == 1.0
