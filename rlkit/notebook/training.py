"""What notebook 03 trains: a preset and a recipe (`rlkit.recipe` switches) on either backend.

The same `recipe` dict goes to whichever backend the preset names: a local preset gets it as
`rlkit train --set recipe.NAME=VALUE` arguments, a SkyRL preset as switches of its recipe (they
become SkyRL's `trainer.algorithm.*` / `generator.*` overrides in the printed command). A
switch a backend cannot honour is refused in one line before anything is submitted.

    plan = training.plan_run("local-tiny", out_dir, recipe={"eps_clip_high": 0.28})
    print(plan)                                   # the command, with the recipe in it
    job = training.launch_run(plan, cluster)      # None for a dry run
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.cluster import launch
from rlkit.cluster.client import Cluster
from rlkit.cluster.jobs import JobHandle
from rlkit.cluster.presets import preset_backend


@dataclass(frozen=True)
class RunPlan:
    """A training plan (`rlkit.cluster.launch.TrainingPlan`) and the recipe changes in it."""

    plan: launch.TrainingPlan
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def run_dir(self) -> str:
        return self.plan.run_dir

    @property
    def run_name(self) -> str:
        return self.plan.run_name

    @property
    def dry_run(self) -> bool:
        return self.plan.dry_run

    def __str__(self) -> str:
        changed = ", ".join(f"{k}={v}" for k, v in self.recipe.items()) or "the preset's own"
        return f"{self.plan}\nrecipe:   {changed}"


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
) -> RunPlan:
    """The plan for `preset` with `recipe` switches changed (and, for a SkyRL preset, `skyrl`
    preset fields): nothing is submitted."""
    recipe = dict(recipe or {})
    if preset_backend(preset) == "local":  # the local config takes the switches, or refuses
        plan = launch.plan_training(
            preset, out_dir, address=address, run_name=run_name, overrides=_local_args(recipe)
        )
        return RunPlan(plan, recipe)
    changes = {
        **(skyrl or {}),
        **{f"recipe.{k.removeprefix('recipe.')}": v for k, v in recipe.items()},
    }
    plan = launch.plan_training(
        preset, out_dir, address=address, run_name=run_name, skyrl_changes=changes
    )
    return RunPlan(plan, recipe)


def launch_run(plan: RunPlan, cluster: Cluster | None) -> JobHandle | None:
    """Submit the plan as a Ray job (None for a dry run); a local preset's job carries the
    recipe's `--set` arguments."""
    return launch.launch_plan(plan.plan, cluster)
