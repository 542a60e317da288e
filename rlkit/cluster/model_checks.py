"""Where a run's model is, checked inside the cluster's runtime by `rlkit preflight`: staged on
shared storage (`rlkit.cluster.stage`), in the node's HF cache, or only on the hub; and whether
its word embeddings are tied (SkyRL's FSDP2 init unties them, rlkit ties them again)."""

from __future__ import annotations

from pathlib import Path

from rlkit.cluster.checks import Check
from rlkit.cluster.stage import MODELS_ROOT, staged_path, staged_record


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
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - no hub client: treat as not cached
        cached = None
    if isinstance(cached, str):
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
