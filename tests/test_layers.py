"""The layers hold (scripts/check_layers.py, run by `make lint`), and a breach is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check_layers.py"


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60
    )


def test_the_tree_keeps_its_layers():
    out = check(ROOT / "rlkit")
    assert out.returncode == 0, out.stdout


def test_forbidden_imports_fail_lint(tmp_path: Path):
    tree = tmp_path / "rlkit"
    shutil.copytree(ROOT / "rlkit", tree, ignore=shutil.ignore_patterns("__pycache__"))
    breaches = {
        "maze/core.py": "from rlkit.notebook import plots\n",  # a low layer reaching up
        "cluster/launch.py": "def f():\n    import torch\n",  # torch in the client, even lazily
        "train/config.py": "import transformers\n",  # a torch-free config
        "episodes/evaluate.py": "import matplotlib\n",  # plotting outside notebook/
        "env/data.py": "import ray\n",
        "train/trainer.py": "import ray\n",  # the trainer's gauges are the run package's now
        "run/__init__.py": "import torch\n",  # the run reader stays torch-free (Studio reads it)
        "model/policy.py": "def f():\n    from vllm import LLM\n",  # vllm outside its module
        "cluster/skyrl/presets.py": "import torch\n",  # the presets a torch-free client reads
    }
    for rel, code in breaches.items():
        with open(tree / rel, "a") as f:
            f.write("\n" + code)
    out = check(tree)
    assert out.returncode == 1
    flagged = {line.split(":")[0].removeprefix("rlkit/") for line in out.stdout.splitlines()[:-1]}
    assert flagged == set(breaches), out.stdout
    assert "allowed only in model, train (not in a torch-free module: TORCH_FREE)" in out.stdout
    assert "maze imports rlkit.notebook from the same or a higher layer" in out.stdout


def test_an_import_circle_fails_lint(tmp_path: Path):
    tree = tmp_path / "rlkit"
    shutil.copytree(ROOT / "rlkit", tree, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tree / "run" / "checkpoints.py", "a") as f:  # rundir imports checkpoints
        f.write("\ndef f():\n    from rlkit.run.rundir import RunDir\n")
    out = check(tree)
    assert out.returncode == 1
    assert "import circle run/checkpoints <-> run/rundir" in out.stdout, out.stdout
