"""The Studio kernel files: environment.yml is the torch-free client, environment-train.yml adds
the local trainer, and notebook 00 runs against a local head in a kernel where torch is absent.

Why not build the env here: conda is not reachable, and the yml's pip section resolves 159
packages over the network: `pip install --dry-run --report` alone took 80 s on 2 cores (11 s
of CPU), a real venv build minutes more. Both are out of the suite's budget, so the suite
resolves the yml's pip section offline, against the metadata of the packages installed in the
project venv (the same pins: requirements/cluster-pins.txt), and the kernel blocks torch
instead of lacking it. Measured against pip: the offline closure of environment.yml's line held
the same 159 names as `pip install --dry-run --report` of it. `RLKIT_TEST_STUDIO_VENV=1` runs
the real build (a fresh venv from the yml's pip lines, then notebook 00 in a kernel of that
venv).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rlkit.cluster.workdir import project_root
from rlkit.notebook.demo import execute

PROJECT_ROOT = project_root()
HEAVY = re.compile(
    r"^(torch|torchvision|torchaudio|triton|transformers|vllm.*|nvidia-.*|flash-attn)$"
)
"""Distributions a client kernel must not pull: torch and what comes with it (CUDA wheels)."""
BLOCKED = ("torch", "torchvision", "transformers")
REMOVED_HERE = {"rfc3987-syntax": ["lark>=1.2.2"]}
"""Pulled by the client (jsonschema[format-nongpl]) but uninstalled from the project venv by
`make venv` (see the Makefile): its requirements as its 1.1.0 wheel states them."""


def pip_lines(yml: str) -> list[str]:
    """The pip section of a conda environment file, as its lines."""
    spec = yaml.safe_load((PROJECT_ROOT / yml).read_text())
    return next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)


def project_requirement(lines: list[str]) -> Requirement:
    """The `-e .[extras]` line as a requirement on rlkit."""
    (editable,) = [ln.split(None, 1)[1] for ln in lines if ln.startswith("-e ")]
    assert editable.startswith("."), editable
    return Requirement("rlkit" + editable[1:])


def _requires(name: str) -> list[str]:
    """rlkit's own requirements come from pyproject.toml (an egg-info can be stale)."""
    if name == "rlkit":
        project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
        extras = project["optional-dependencies"]
        return project["dependencies"] + [
            f"{r}; extra == '{e}'" for e, reqs in extras.items() for r in reqs
        ]
    return metadata.distribution(name).requires or []


def closure(root: Requirement) -> dict[str, str]:
    """Every distribution pip would install for `root`, resolved on this venv's versions:
    {name: version}. Fails if one is not installed here or its version misses a specifier."""
    seen: dict[str, str] = {}
    done: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    todo = [root]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in REMOVED_HERE:
            seen[name] = "not installed here"
            todo.extend(Requirement(r) for r in REMOVED_HERE[name])
            continue
        version = "0.1.0" if name == "rlkit" else metadata.version(name)
        assert req.specifier.contains(version, prereleases=True), f"{req} vs installed {version}"
        seen[name] = version
        for extra in {""} | set(req.extras):
            if (name, extra) in done:
                continue
            done.add((name, extra))
            for line in _requires(name):
                dep = Requirement(line)
                if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                    todo.append(dep)
    return seen


def test_environment_yml_is_the_torch_free_client():
    lines = pip_lines("environment.yml")
    assert "-c requirements/cluster-pins.txt" in lines
    root = project_requirement(lines)
    assert {"cluster", "notebook", "sagemaker"} <= root.extras and "train" not in root.extras
    client = closure(root)
    assert not sorted(n for n in client if HEAVY.match(n)), "the client pulls torch"
    for needed in (
        "ray",
        "papermill",
        "ipywidgets",
        "matplotlib",
        "toolkit-for-ray-on-sagemaker-ai",
    ):
        assert needed in client, needed
    # the training file is the client plus the local trainer: the check above can see torch
    train_root = project_requirement(pip_lines("environment-train.yml"))
    assert root.extras < train_root.extras and "train" in train_root.extras
    trainer = closure(train_root)
    assert {"torch", "torchvision", "transformers"} <= set(trainer) and set(client) < set(trainer)


def blocking_kernel(jupyter_dir: Path, python: str, name: str = "rlkit-no-torch") -> str:
    """A kernelspec in `jupyter_dir` whose kernel cannot import torch (or what needs it)."""
    boot = (
        "import sys\n"
        f"for m in {BLOCKED!r}: sys.modules[m] = None\n"
        "from ipykernel import kernelapp\nkernelapp.launch_new_instance()"
    )
    spec = {"argv": [python, "-c", boot, "-f", "{connection_file}"], "language": "python"}
    spec["display_name"] = name
    (jupyter_dir / "kernels" / name).mkdir(parents=True)
    (jupyter_dir / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    return name


def run_notebook_00(tmp_path: Path, monkeypatch, address: str, kernel: str) -> str:
    """Execute notebook 00 against `address`; its text outputs (errors fail the test)."""
    path = execute("00_setup_and_connect", tmp_path / "out", {"address": address}, kernel=kernel)
    cells = json.loads(path.read_text())["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    return "".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for o in outputs
    )


@pytest.mark.slow
def test_notebook_00_runs_against_a_local_head_without_torch(tmp_path, monkeypatch, ray_cluster):
    jupyter_dir = tmp_path / "jupyter"
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_dir))
    kernel = blocking_kernel(jupyter_dir, sys.executable)
    text = run_notebook_00(tmp_path, monkeypatch, ray_cluster.address, kernel)
    assert ray_cluster.address in text and "'problems': 'none'" in text


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    not os.environ.get("RLKIT_TEST_STUDIO_VENV"),
    reason="RLKIT_TEST_STUDIO_VENV=1: builds a venv (minutes, network)",
)
def test_a_venv_built_from_environment_yml_runs_notebook_00(tmp_path, monkeypatch, ray_cluster):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    args = [a for line in pip_lines("environment.yml") for a in line.split(None, 1)]
    pip = [python, "-m", "pip", "install", "-q", *args]
    subprocess.run(pip, check=True, cwd=PROJECT_ROOT, timeout=800)
    probe = "import importlib.util as u; print(u.find_spec('torch'))"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout == "None\n"
    jupyter_dir = tmp_path / "jupyter"
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_dir))
    kernel = blocking_kernel(jupyter_dir, python, name="rlkit-studio")
    text = run_notebook_00(tmp_path, monkeypatch, ray_cluster.address, kernel)
    assert "'torch': 'missing'" in text and "'problems': 'none'" in text
