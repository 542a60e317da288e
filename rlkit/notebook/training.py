"""What notebook 03 trains: a preset and a recipe (`rlkit.recipe` switches) on either backend.

The recipe becomes `--set recipe.NAME=VALUE` arguments for a local preset and SkyRL overrides
for a SkyRL one; a switch a backend cannot honour is refused before anything is submitted.

    plan = training.plan_run("local-tiny", out_dir, recipe={"eps_clip_high": 0.28})
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlkit.cluster import launch
from rlkit.cluster.presets import preset_backend


def _local_args(recipe: Mapping[str, Any]) -> list[str]:
    if not recipe:
        return []
    from rlkit.recipe import local_set_args  # the recipe vocabulary (torch-free)

    return local_set_args(recipe)


def plan_run(
    preset: str,
    out_dir: str | Path,
    *,
    address: str | None = None,
    run_name: str | None = None,
    skyrl: Mapping[str, object] | None = None,
    recipe: Mapping[str, Any] | None = None,
) -> launch.TrainingPlan:
    """The plan for `preset` with `recipe` switches changed (and, for a SkyRL preset, `skyrl`
    preset fields): nothing is submitted; the plan's `recipe` names the switches it changes."""
    recipe = dict(recipe or {})
    if preset_backend(preset) == "local":  # the local config takes the switches, or refuses
        return launch.plan_training(
            preset, out_dir, address=address, run_name=run_name, overrides=_local_args(recipe)
        )
    changes = {
        **(skyrl or {}),
        **{f"recipe.{k.removeprefix('recipe.')}": v for k, v in recipe.items()},
    }
    return launch.plan_training(
        preset, out_dir, address=address, run_name=run_name, skyrl_changes=changes
    )
