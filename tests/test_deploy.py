"""deploy/: the runtime image and the manifests agree with the versions the tests run, and lint.

What can be checked without Docker or a cluster: hadolint and shellcheck pass; the image pins
the SkyRL release and Ray of requirements/cluster-pins.txt; SkyRL's environment comes first on
PATH, so the job's `python -m rlkit.cluster.skyrl.entry` runs on SkyRL's interpreter; both
manifest groups run that image; SkyRL's trainer task cannot fit on the head pod but fits a
worker; the manifests, for every instance size and node count, pass KubeRay's own CRD schema
(v1.6.2, made strict like kubectl's field validation) and carry EFA when they span nodes.
What cannot: the image build itself (`deploy/build-image.sh`, needs Docker and the
network), CUDA, vLLM 0.30 on the GPUs.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.raycluster import EFA_RESOURCE, INSTANCE_LABEL, raycluster, rayjob
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.overrides import build_overrides, entrypoint_command
from rlkit.cluster.skyrl.preset_sections import G7E
from rlkit.cluster.skyrl.presets import PRESETS, get_preset
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

    need = get_preset("qwen3vl-8b").layout.driver_memory_gb
    assert (
        gib(head["resources"]["limits"]["memory"])
        < need
        <= gib(worker["resources"]["limits"]["memory"])
    )


IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/rlkit-skyrl:skyrl-0.4.0"


def test_rayjob_retries_on_new_clusters_from_the_same_template(tmp_path, capsys):
    out = tmp_path / "run.rayjob.yaml"
    argv = ["submit", "--preset", "qwen3vl-8b", "--run-name", "maze-a", "--rayjob", str(out)]
    assert rlkit_main([*argv, "--image", IMAGE]) == 0
    printed = capsys.readouterr().out
    assert f"kubectl apply -n ray -f {out}" in printed and "rebuild" in printed
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
    for container in worker_containers(cluster["spec"]) + [head_container(cluster["spec"])]:
        container["image"] = IMAGE
    assert spec["rayClusterSpec"] == cluster["spec"]  # one template: no drift
    argv = shlex.split(spec["entrypoint"])
    args, overrides = parse_args(argv[3:])
    assert overrides == build_overrides(get_preset("qwen3vl-8b"), "maze-a")
    assert "trainer.resume_mode=latest" in overrides  # every retry resumes from /fsx
    assert args.paths.data_dir == "/fsx/rlkit/runs/maze-a/data"  # and reuses the same rows
    with pytest.raises(UsageError, match="backoff limit"):
        rayjob(get_preset("qwen3vl-8b"), "x", backoff_limit=0)


def test_an_unedited_image_placeholder_is_refused_in_one_line(tmp_path, capsys):
    for kind in ("--rayjob", "--raycluster"):
        argv = ["submit", "--preset", "qwen3vl-8b", kind, str(tmp_path / "m.yaml")]
        assert rlkit_main(argv) == 2 and not (tmp_path / "m.yaml").exists()
        err = capsys.readouterr().err
        assert "placeholder ACCOUNT.dkr.ecr.REGION" in err and err.count("\n") == 1
    assert rlkit_main(["submit", "--preset", "qwen3vl-8b", "--dry-run", "--image", IMAGE]) == 2
    assert "with --raycluster or --rayjob" in capsys.readouterr().err


def test_rayjob_forwards_env_through_a_secret_never_the_value(tmp_path, capsys, monkeypatch):
    """`--env` reaches every pod of the RayJob's clusters (the driver on the head, SkyRL's
    trainer on a worker) from the run's Secret; the value itself is in no file."""
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-123")
    out = tmp_path / "a.rayjob.yaml"
    argv = ["submit", "--preset", "qwen3vl-8b", "--run-name", "a", "--rayjob", str(out)]
    assert rlkit_main([*argv, "--image", IMAGE, "--logger", "wandb", "--env", "WANDB_API_KEY"]) == 0
    printed = capsys.readouterr().out
    assert "kubectl create secret generic a-env -n ray" in printed
    assert '--from-literal=WANDB_API_KEY="$WANDB_API_KEY"' in printed
    assert "wandb-secret-123" not in out.read_text() + printed
    job = yaml.safe_load(out.read_text())
    assert crd_errors(job) == []
    ref = {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "a-env", "key": "WANDB_API_KEY"}},
    }
    spec = job["spec"]["rayClusterSpec"]
    assert all(ref in c["env"] for c in [head_container(spec), *worker_containers(spec)])
    assert rlkit_main([*argv, "--image", IMAGE, "--env", "NOT_SET_ANYWHERE"]) == 2
    assert "not set in this shell" in capsys.readouterr().err


def rayjob_schema() -> dict:
    """KubeRay v1.6.2's RayJob CRD schema (tests/kuberay/; its `source` says where from), made
    strict as `kubectl apply`'s server-side field validation is: an unknown field fails."""
    with gzip.open(ROOT / "tests" / "kuberay" / "rayjob-v1.6.2.schema.json.gz") as f:
        return strict(json.load(f)["schema"])


def strict(node):
    if isinstance(node, dict):
        node = {k: strict(v) for k, v in node.items()}
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        return node
    return [strict(v) for v in node] if isinstance(node, list) else node


def crd_errors(manifest: dict) -> list[str]:
    """Where `manifest` (a RayJob, or a RayCluster checked as a RayJob's rayClusterSpec) breaks
    KubeRay's CRD schema."""
    schema = rayjob_schema()
    if manifest["kind"] == "RayCluster":
        spec = schema["properties"]["spec"]["properties"]["rayClusterSpec"]
        schema = {**schema, "properties": {**schema["properties"], "spec": spec}}
    validator = jsonschema.Draft7Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]


def head_container(cluster_spec: dict) -> dict:
    return cluster_spec["headGroupSpec"]["template"]["spec"]["containers"][0]


def worker_containers(cluster_spec: dict) -> list[dict]:
    return [
        c for g in cluster_spec["workerGroupSpecs"] for c in g["template"]["spec"]["containers"]
    ]


def test_the_template_is_the_default_presets_cluster_and_valid():
    template = yaml.safe_load((DEPLOY / "raycluster.yaml").read_text())
    assert raycluster(get_preset("qwen3vl-8b")) == template  # one source: no drift
    assert crd_errors(template) == []
    broken = yaml.safe_load((DEPLOY / "raycluster.yaml").read_text())
    broken["spec"]["workerGroupSpecs"][0]["replica"] = 2  # a typo KubeRay would refuse
    broken["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0  # must be a string
    assert len(crd_errors(broken)) == 2  # the check is real


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("instance", sorted(i for i, t in G7E.items() if t.efa))
def test_clusters_for_every_size_carry_efa_when_multi_node(instance, nodes):
    sky = get_preset("qwen3vl-2b-smoke", instance_type=instance, gpus_per_node=None, nodes=nodes)
    cluster = raycluster(sky)
    assert crd_errors(cluster) == []
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == nodes <= group["maxReplicas"]
    assert group["template"]["spec"]["nodeSelector"][INSTANCE_LABEL] == instance
    (worker,) = worker_containers(cluster["spec"])
    limits, env = worker["resources"]["limits"], {e["name"]: e.get("value") for e in worker["env"]}
    inst = G7E[instance]
    assert limits["nvidia.com/gpu"] == group["rayStartParams"]["num-gpus"] == str(inst.gpus)
    assert int(limits["cpu"]) < inst.vcpus and int(limits["memory"][:-2]) < inst.memory_gib
    if nodes > 1:  # every worker pod or none: mixing EFA and non-EFA pods hangs NCCL
        assert limits[EFA_RESOURCE] == str(inst.efa) and env["FI_PROVIDER"] == "efa"
    else:
        assert EFA_RESOURCE not in limits and "FI_PROVIDER" not in env
    assert worker["resources"]["requests"] == limits


def test_multi_node_rayjob_carries_efa_a_ttl_and_validates(tmp_path, capsys):
    out = tmp_path / "two.rayjob.yaml"
    argv = ["submit", "--preset", "qwen3vl-8b", "--nodes", "2", "--rayjob", str(out)]
    argv += ["--image", IMAGE]
    assert rlkit_main(argv) == 0
    job = yaml.safe_load(out.read_text())
    assert crd_errors(job) == []
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    (worker,) = worker_containers(job["spec"]["rayClusterSpec"])
    assert worker["resources"]["limits"][EFA_RESOURCE] == "4"
    assert {"name": "FI_PROVIDER", "value": "efa"} in worker["env"]
    cluster_file = tmp_path / "two.raycluster.yaml"
    assert rlkit_main([*argv[:-4], "--raycluster", str(cluster_file), *argv[-2:]]) == 0
    assert "2 x ml.g7e.48xlarge, each pod 8 GPUs" in capsys.readouterr().out
    cluster = yaml.safe_load(cluster_file.read_text())
    assert cluster["spec"] == job["spec"]["rayClusterSpec"] and crd_errors(cluster) == []


def test_a_cpu_preset_has_no_cluster_manifest():
    with pytest.raises(UsageError, match="without instance_type"):
        raycluster(get_preset("skyrl-tiny-cpu"))


# The vLLM engine metrics the dashboard reads, as Ray's Prometheus exports them. Verified in
# source: vllm/v1/metrics/loggers.py names them `vllm:num_requests_running`,
# `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (gauges), `vllm:prompt_tokens`,
# `vllm:generation_tokens` (counters: `_total`) and `vllm:time_to_first_token_seconds`
# (histogram: `_sum`, `_count`); vllm/v1/metrics/ray_wrappers.py
# (`_get_sanitized_opentelemetry_name`) turns ':' into '_', and Ray adds `ray_`, as
# skyrl/train/utils/vllm_metrics_scraper.py (`_GAUGE_NUM_RUNNING`, ...) scrapes them.
VLLM_EXPORTED = {
    "ray_vllm_num_requests_running",
    "ray_vllm_num_requests_waiting",
    "ray_vllm_kv_cache_usage_perc",
    "ray_vllm_prompt_tokens_total",
    "ray_vllm_generation_tokens_total",
    "ray_vllm_time_to_first_token_seconds_sum",
    "ray_vllm_time_to_first_token_seconds_count",
}
SKYRL_STEP_KEYS = (  # keys a SkyRL CPU run's driver log shows at a training step
    "reward/avg_raw_reward",
    "environment/solve_rate",
    "policy/policy_entropy",
    "policy/loss_metrics/clip_ratio",
    "policy/grad_norm",
    "policy/rollout_train_logprobs_abs_diff_mean",
)


def test_dashboard_panels_name_exported_metrics():
    """Every query names a gauge rlkit exports or a vLLM engine metric SkyRL's engines export;
    each gauge is fed by a name the SkyRL bridge produces; the vLLM names are in vLLM's source."""
    from rlkit.cluster.skyrl.bridge import rlkit_names
    from rlkit.run.metrics import GAUGES

    board = json.loads((DEPLOY / "grafana-rlkit.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries = exprs + [json.dumps(v.get("query", "")) for v in board["templating"]["list"]]
    used = {m for q in queries for m in re.findall(r"\bray_\w+", q.replace("ray_io_cluster", ""))}
    rlkit_gauges = {f"ray_{g}" for g in GAUGES}
    assert used <= rlkit_gauges | VLLM_EXPORTED, used - rlkit_gauges - VLLM_EXPORTED
    assert {"ray_rlkit_policy_entropy", "ray_rlkit_clip_fraction", "ray_rlkit_grad_norm"} <= used
    assert used & VLLM_EXPORTED == VLLM_EXPORTED
    fed = {key for _, sources in GAUGES.values() for key, _ in sources}
    assert fed <= set(rlkit_names(dict.fromkeys(SKYRL_STEP_KEYS, 1.0))) | {"eval/solve_rate"}
    vllm = Path(importlib.util.find_spec("vllm").origin).parent / "v1" / "metrics"  # not imported
    source = (vllm / "loggers.py").read_text()
    for name in VLLM_EXPORTED:
        base = re.sub(r"_(total|sum|count)$", "", name.removeprefix("ray_vllm_"))
        assert f'name="vllm:{base}"' in source, f"{name} is not a vLLM metric any more"
    assert 're.sub(r"[^a-zA-Z0-9_]", "_", name)' in (vllm / "ray_wrappers.py").read_text()
    for e in exprs:  # every panel filters by Ray cluster; rlkit's gauges also by run
        assert 'ray_io_cluster=~"$cluster"' in e
        assert 'run=~"$run"' in e or "ray_rlkit_" not in e
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["cluster"]["allValue"] == variables["run"]["allValue"] == ".*"
    assert "$cluster" in variables["run"]["query"]["query"]  # runs of the chosen cluster
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    spots = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]}
    assert len(spots) == len(board["panels"])  # no panel hides another
