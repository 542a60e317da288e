"""The local trainer's named presets: `local-tiny` (the embedded default), `smoke` (a few seconds,
for tests and `rlkit demo --quick`) and `local-tiny-visgym` (the seed's task on the tiny model).

    rlkit train --preset local-tiny --run-dir runs/tiny
    cfg = preset("smoke").with_overrides({"schedule.steps": 8})
"""

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
        # plain GRPO on the env's full budget, no KL: an untrained model's 4 x 4 episodes
        # rarely score on a tight budget, and a smoke run must train on its few steps
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
    style=replace(SET_ENV["visgym-easy"].style, cell_px=8),
)
"""VisGym's maze_2d/easy for the tiny model: the same mazes, positions, rules (`stop` on the
target wins), 18 turns, parser and feedback; the picture VisGym's colours at 8 px a square
(72 x 72 px, one 8 px vision patch per square: 81 image tokens with merge 1), and the compact
prompt line (`COMPACT_SQUARES_TASK`). The `test` set's agent-centred 48 px window does not
apply: squares mazes are drawn whole, and the whole 9x9 maze (agent and target both in view)
is the state, so a Markov policy can play it. At 25 px the processor would keep 225 px as
28x28 patches (784 tokens, ~10x the forward); merge 2 at 8 px would cut squares across tokens
(72 px is not a multiple of 16)."""


def _local_tiny_visgym() -> TrainConfig:
    """The embedded default on the seed's task (`benchmarks/bench_learning.py --preset
    local-tiny-visgym`): VisGym's maze_2d/easy, evaluated on `visgym-easy` (seeds 0..63)."""
    base = TrainConfig()
    return TrainConfig(
        name="local-tiny-visgym",
        task=TaskConfig(
            spec=pinned_spec("visgym-easy"), env=VISGYM_TINY_ENV, eval_set="visgym-easy"
        ),
        model=ModelConfig(tiny=TinyConfig(merge=1)),
        # a validation check plays 64 mazes x 2 episodes of up to 18 turns (~10x a BC step):
        # every 20 steps; the whole-maze oracle takes hundreds of steps, not local-tiny's ~60.
        # BC at local-tiny's 1e-3 diverged at step 32 (loss 0.96 -> 3.16, then uniform for
        # good: seed 0, 1 thread): 3e-4
        warm_start=replace(
            base.warm_start, lr=3e-4, fine_lr=1e-4, check_every=20, val_samples=2, max_steps=600
        ),
        # 16 mazes a step: a visgym episode is ~15 turns of ~100-token prompts (81 image
        # tokens), 4x a `test` turn, and half the mazes of local-tiny keep a step near 15 s
        grpo=replace(base.grpo, mazes_per_step=16, lr_late_from=60),
        schedule=replace(base.schedule, steps=120, eval_samples=2),
    )


PRESETS = {"local-tiny": TrainConfig, "smoke": _smoke, "local-tiny-visgym": _local_tiny_visgym}


def preset(name: str) -> TrainConfig:
    if name not in PRESETS:
        raise UsageError(
            f"unknown preset {name!r}: use one of {', '.join(PRESETS)} (cluster: rlkit submit)"
        )
    return PRESETS[name]()
