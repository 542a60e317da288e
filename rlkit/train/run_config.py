"""A run's recorded config (run.json's `config`) read back: the recipe's renames, the config a
resume trains with, and which changes a resume may make. Torch-free."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rlkit.errors import UsageError
from rlkit.settings import RENAMED, build_config
from rlkit.train.config import RESUME_MAY_CHANGE, GRPOConfig, TrainConfig
from rlkit.train.presets import PRESETS, preset


def upgrade_config_dict(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run.json `config` as this version writes it: the keys `RENAMED` replaced move into
    `recipe` (`min_informative` becomes dynamic_sampling_type=filter where it meant the same)."""
    out = json.loads(json.dumps(dict(config)))
    grpo = out.get("grpo")
    if not isinstance(grpo, dict) or "recipe" in out:
        return out
    recipe: dict[str, Any] = {}
    for old, new in RENAMED.items():
        section, _, name = old.rpartition(".")
        if section == "grpo" and name in grpo:
            recipe[new.split(".", 1)[1]] = grpo.pop(name)
    if "dynamic_sampling_type" in recipe:
        wanted = recipe["dynamic_sampling_type"]
        per_step = grpo.get("mazes_per_step", GRPOConfig.mazes_per_step)
        if wanted is not None and wanted != per_step:
            raise UsageError(
                f"grpo.min_informative={wanted} trained on every group drawn until {wanted} "
                f"taught; the recipe's dynamic sampling (SkyRL's filter) trains exactly "
                f"mazes_per_step={per_step}: this run cannot resume with the same recipe, "
                "start a new run dir"
            )
        recipe["dynamic_sampling_type"] = None if wanted is None else "filter"
    # the old trainer's defaults for what its run.json may lack (SkyRL's defaults differ)
    recipe.setdefault("zero_variance_filter", True)
    out["recipe"] = recipe
    return out


def config_from_dict(config: Mapping[str, Any], where: str = "run.json") -> TrainConfig:
    """The TrainConfig a run recorded (`TrainConfig.to_dict()` form), missing fields at their
    defaults, an unknown or invalid key a one-line UsageError naming `where`."""
    try:
        return build_config(TrainConfig, upgrade_config_dict(config))
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def resume_config(
    saved: Mapping[str, Any] | None,
    cfg: TrainConfig,
    explicit: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """The config a resume trains with: the recorded one (`saved`; None: `cfg`) with the
    `explicit` changes on top (`--set`; None: every field where `cfg` differs from its preset)."""
    if not saved:
        return cfg
    saved = upgrade_config_dict(saved)
    if explicit is None and not config_changes(saved, cfg.to_dict()):
        return cfg  # a new run, or the same config: nothing to rebuild
    if explicit is not None:
        return config_from_dict(saved).with_overrides(dict(explicit))
    base = preset(cfg.name).to_dict() if cfg.name in PRESETS else saved
    for key, (_, new) in config_changes(base, cfg.to_dict()).items():  # into `saved`, a copy
        *path, leaf = key.split(".")
        node = saved
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = new
    return config_from_dict(saved)


def config_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old, new) for every field both configs have whose values differ as JSON."""
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    out: dict[str, tuple[Any, Any]] = {}
    for key in old.keys() & new.keys():
        a, b = old[key], new[key]
        if isinstance(a, dict) and isinstance(b, dict):
            out |= config_changes(a, b, f"{prefix}{key}.")
        elif a != b:
            out[f"{prefix}{key}"] = (a, b)
    return dict(sorted(out.items()))


def check_resume(saved: Mapping[str, Any] | None, cfg: TrainConfig, where: str) -> dict:
    """The changes from run `where`'s saved config (None: not recorded) to `cfg` if a resume may
    make each (`RESUME_MAY_CHANGE`); else a one-line UsageError naming them."""
    changes = config_changes(upgrade_config_dict(saved), cfg.to_dict()) if saved else {}
    fixed = [f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items() if k not in RESUME_MAY_CHANGE]
    if fixed:
        raise UsageError(
            f"{where} was trained with another recipe ({', '.join(fixed)}): resume with its "
            "settings (run.json) or start a new --run-dir; a resume may change only "
            + ", ".join(RESUME_MAY_CHANGE)
        )
    return changes
