"""deploy/: the runtime image and the manifests agree with the versions the tests run, and lint.

What can be checked without Docker or a cluster: hadolint and shellcheck pass; the image pins
the SkyRL release and Ray of requirements/cluster-pins.txt; SkyRL's environment comes first on
PATH, so the job's `python -m rlkit.cluster.skyrl.entry` runs on SkyRL's interpreter; both
manifest groups run that image; SkyRL's trainer task cannot fit on the head pod but fits a
worker. What cannot: the image build itself (`deploy/build-image.sh`, needs Docker and the
network), CUDA, vLLM 0.30 on the GPUs.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.rayjob import rayjob
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.presets import PRESETS, build_overrides, entrypoint_command, get_preset
from rlkit.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    assert Path(found).exists(), f"{name} is missing: it comes with the dev extra"
    return found


def pins() -> dict[str, str]:
    text = (ROOT / "requirements" / "cluster-pins.txt").read_text()
    return dict(ln.split("==") for ln in text.splitlines() if "==" in ln and ln[0] != "#")


def arg(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert m, f"deploy/Dockerfile has no ARG {name}"
    return m.group(1)


def test_dockerfile_and_script_lint():
    lint = subprocess.run([tool("hadolint"), str(DEPLOY / "Dockerfile")], capture_output=True)
    assert lint.returncode == 0, lint.stdout.decode()
    sh = subprocess.run([tool("shellcheck"), str(DEPLOY / "build-image.sh")], capture_output=True)
    assert sh.returncode == 0, sh.stdout.decode()


def test_image_pins_the_tested_versions():
    assert arg("SKYRL_VERSION") == pins()["skyrl"] and arg("SKYRL_REF").endswith(pins()["skyrl"])
    assert f"ray-{pins()['ray']}-py3.12" in arg("BASE_IMAGE")
    toolkit = "toolkit-for-ray-on-sagemaker-ai"  # hang detection's rules (rlkit.cluster.hang)
    assert f'"{toolkit}=={pins()[toolkit]}"' in (DEPLOY / "Dockerfile").read_text()
    text = (DEPLOY / "Dockerfile").read_text()
    assert "uv sync --frozen --extra fsdp" in text
    assert re.search(r"PATH=/opt/skyrl/\.venv/bin:", text)  # `python` is SkyRL's interpreter
    assert "check_skyrl_config.py" in text  # presets validated at build time


def test_entrypoint_is_what_the_image_provides():
    for name in PRESETS:
        argv = shlex.split(entrypoint_command(get_preset(name), "r"))
        assert argv[:3] == ["python", "-m", "rlkit.cluster.skyrl.entry"]


def test_manifest_runs_the_image_and_places_the_trainer_on_a_worker():
    cluster = yaml.safe_load((DEPLOY / "raycluster.yaml").read_text())
    assert cluster["spec"]["rayVersion"] == pins()["ray"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    worker = workers["template"]["spec"]["containers"][0]
    script = (DEPLOY / "build-image.sh").read_text()
    repo = re.search(r"REPO=\$\{REPO:-(\S+)\}", script).group(1)
    tag = re.search(r"TAG=\$\{TAG:-(\S+)\}", script).group(1)
    assert head["image"] == worker["image"] and head["image"].endswith(f"/{repo}:{tag}")

    def gib(q: str) -> float:
        return float(q.removesuffix("Gi"))

    need = get_preset("qwen3vl-8b-6gpu").driver_memory_gb
    assert (
        gib(head["resources"]["limits"]["memory"])
        < need
        <= gib(worker["resources"]["limits"]["memory"])
    )


def test_rayjob_retries_on_new_clusters_from_the_same_template(tmp_path, capsys):
    out = tmp_path / "run.rayjob.yaml"
    argv = ["submit", "--preset", "qwen3vl-8b-6gpu", "--run-name", "maze-a", "--rayjob", str(out)]
    assert rlkit_main(argv) == 0
    assert f"kubectl apply -n ray -f {out}" in capsys.readouterr().out
    job = yaml.safe_load(out.read_text())
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == (
        "ray.io/v1",
        "RayJob",
        "maze-a",
    )
    assert spec["backoffLimit"] == 3 and spec["shutdownAfterJobFinishes"] is True
    assert "activeDeadlineSeconds" not in spec and "clusterSelector" not in spec
    cluster = yaml.safe_load((DEPLOY / "raycluster.yaml").read_text())
    assert spec["rayClusterSpec"] == cluster["spec"]  # one template: no drift
    argv = shlex.split(spec["entrypoint"])
    args, overrides = parse_args(argv[3:])
    assert overrides == build_overrides(get_preset("qwen3vl-8b-6gpu"), "maze-a")
    assert "trainer.resume_mode=latest" in overrides  # every retry resumes from /fsx
    assert args.data_dir == "/fsx/rlkit/runs/maze-a/data"  # and reuses the same rows
    with pytest.raises(UsageError, match="backoff limit"):
        rayjob(get_preset("qwen3vl-8b-6gpu"), "x", backoff_limit=0)
