"""The checks the preflight job runs without a GPU, each a `Check` (name, status, what was
found, how to fix it; `rlkit.cluster.gpu_checks` reports its verdicts the same way):
`budget_checks` (the dry run's token budget, from the checkpoint's own files), `model_check`
(staged, in the node's HF cache, or only on the hub) and `tied_embeddings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.cluster.stage import MODELS_ROOT, staged_path, staged_record

if TYPE_CHECKING:
    from rlkit.model.budget_report import BudgetReport


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """ok, warn (the run starts but something costs time or money), fail, or skip (not run
    here, the detail says why)."""
    detail: str
    fix: str = ""


def budget_checks(report: BudgetReport) -> list[Check]:
    """The token budget as preflight reports it: the checkpoint's own facts (where its files
    are), the image as the processor sees it, and the budget: fail where the turn budget cannot
    fit (the dry run refuses it too), warn where full-length answers cut episodes short."""
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
    """Where the run's model comes from: a staged copy on shared storage (ok; verified when
    `rlkit model stage` wrote its marker), this node's HF cache (ok), or the hub at job start
    (warn, with the command that stages it, and a staged copy pointed at if one is there)."""
    if model.startswith("/"):
        if not (Path(model) / "config.json").is_file():
            return Check(
                "model",
                "fail",
                f"{model} has no config.json",
                f"stage it there: rlkit model stage MODEL --to {model} --address ADDR",
            )
        record = staged_record(model)
        if record is None:
            return Check("model", "ok", f"{model} (shared storage; not staged by rlkit, unchecked)")
        return Check(
            "model",
            "ok",
            f"{model} (staged from {record['source']}, {record['bytes'] / 1e9:.1f} GB, verified)",
        )
    staged = staged_path(model, models_root)
    if staged_record(staged) is not None:
        return Check(
            "model",
            "warn",
            f"{model} comes from the hub at job start, but a staged copy is at {staged}",
            f"pass --model {staged}",
        )
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
    if model.startswith("/"):
        path = Path(model) / "config.json"
        return path if path.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - no hub client: not cached
        return None
    return Path(cached) if isinstance(cached, str) else None


def tied_embeddings(config: dict) -> Check:
    """Whether lm_head shares embed_tokens' matrix: SkyRL's FSDP2 init unties such a model and
    rlkit ties it again (`rlkit.cluster.skyrl.fixes`). transformers ties by the top-level flag
    (Qwen3-VL's default there: False), whatever text_config says."""
    top = config.get("tie_word_embeddings")
    text = (config.get("text_config") or {}).get("tie_word_embeddings")
    if top:
        return Check("tie_word_embeddings", "ok", "tied (re-tied after FSDP init by rlkit)")
    if text:
        return Check(
            "tie_word_embeddings",
            "warn",
            "text_config says tied, the top level does not: transformers loads it untied",
            "if the checkpoint has no lm_head.weight, set tie_word_embeddings: true at the top "
            "of config.json",
        )
    return Check("tie_word_embeddings", "ok", "untied")
