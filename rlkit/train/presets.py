"""The local trainer's presets: `local-tiny` (the default), `smoke` (a few seconds, for tests and
`rlkit demo --quick`) and `local-tiny-visgym` (the seed's task on the tiny model)."""

from __future__ import annotations

from dataclasses import replace

from rlkit.env.maze_env import SET_ENV
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_spec
from rlkit.model.config import TinyConfig
from rlkit.train.config import (
    LOCAL_TINY_RECIPE,
    GRPOConfig,
    ModelConfig,
    ScheduleConfig,
    TaskConfig,
    TrainConfig,
    WarmStartConfig,
)


def _smoke() -> TrainConfig:
    tiny = TinyConfig(
        hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128, vision_hidden=32, vision_heads=2
    )
    return TrainConfig(
        name="smoke",
        model=ModelConfig(tiny=tiny),
        warm_start=WarmStartConfig(
            batch=32, max_steps=4, stop_at=1.0, check_every=2, val_samples=1, fine_from=None
        ),
        # plain GRPO on the env's full budget, no KL: a smoke run must train on its few steps
        grpo=GRPOConfig(
            mazes_per_step=4,
            group_size=4,
            epochs=2,
            minibatch=64,
            lr_late=None,
            turn_slack=None,
            tight_fraction=1.0,
            lr_end=None,
        ),
        recipe=replace(LOCAL_TINY_RECIPE, kl_loss_coef=0.0, fail_advantage=None),
        schedule=ScheduleConfig(
            steps=4, eval_every=2, eval_samples=1, ckpt_every=2, keep=2, threads=1
        ),
    )


VISGYM_TINY_ENV = replace(
    SET_ENV["visgym-easy"],
    prompt_style="compact",
    style=replace(SET_ENV["visgym-easy"].style, cell_px=8, pad=1),
)
"""VisGym's maze_2d/easy env at 8 px a square plus a one-square border (80 x 80 px, 25 image
tokens) and the compact prompt line (docs/benchmarks.md)."""

VISGYM_TINY = TinyConfig(merge=1, patch_size=16, vision_depth=8)
"""The tiny model for the seed's task: a vision tower of 8 blocks over 25 patches."""


def _local_tiny_visgym() -> TrainConfig:
    """The default on the seed's task: VisGym's maze_2d/easy, evaluated on `visgym-easy`."""
    base = TrainConfig()
    return TrainConfig(
        name="local-tiny-visgym",
        task=TaskConfig(
            spec=pinned_spec("visgym-easy"), env=VISGYM_TINY_ENV, eval_set="visgym-easy"
        ),
        model=ModelConfig(tiny=VISGYM_TINY),
        # the per-square loss alone, then BC on open squares near the target first (benchmarks.md)
        warm_start=replace(
            base.warm_start,
            states="open",
            batch=64,
            lr=1e-3,
            warmup_steps=50,
            curriculum_steps=300,
            aux_weight=1.0,
            tower_steps=1500,
            stop_at=0.25,
            fine_from=None,
            check_every=5,
            val_samples=2,
            max_steps=3000,
        ),
        grpo=replace(
            base.grpo,
            mazes_per_step=16,
            lr_late_from=60,
            aux_weight=1.0,
            aux_steps=8,
        ),
        schedule=replace(base.schedule, steps=160, eval_samples=2),
    )


PRESETS = {"local-tiny": TrainConfig, "smoke": _smoke, "local-tiny-visgym": _local_tiny_visgym}


def preset(name: str) -> TrainConfig:
    if name not in PRESETS:
        raise UsageError(
            f"unknown preset {name!r}: use one of {', '.join(PRESETS)} (cluster: rlkit submit)"
        )
    return PRESETS[name]()
