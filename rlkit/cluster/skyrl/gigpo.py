"""GiGPO's step-level credit on SkyRL (`advantage_estimator=gigpo`, with a history window): the
episode level registered as SkyRL's GRPO, the step level added by `RlkitTrainer`:
docs/recipes.md#step-level-credit-gigpo."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlkit.recipe import Recipe
from rlkit.train.grpo import step_credit

GIGPO = "gigpo"
STATES_KEY = "rlkit_states"
"""The generator output's (and training input metadata's) list of each row's (row, col)."""


def register_gigpo() -> None:
    """SkyRL's registry knows `gigpo` (idempotent: its episode level is SkyRL's GRPO)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        AdvantageEstimatorRegistry,
        compute_grpo_outcome_advantage,
    )

    if GIGPO not in AdvantageEstimatorRegistry.list_available():
        AdvantageEstimatorRegistry.register(GIGPO, compute_grpo_outcome_advantage)


def step_terms(
    uids: Sequence[str],
    is_last_step: Sequence[bool],
    row_rewards: torch.Tensor,
    states: Sequence[Sequence[int]],
    recipe: Recipe,
) -> torch.Tensor:
    """(R,) float32: each row's step-level advantage, `gigpo_step_weight` x its anchor-group
    advantage. Rows are episodes' turns in order; `uids`: each row's group (maze); `row_rewards`
    (R,): the episode's reward on its last row; `states` (R, 2): the square each answer was on."""
    ends = [i for i, last in enumerate(is_last_step) if last]
    lengths = torch.tensor([b - a for a, b in zip([-1, *ends[:-1]], ends, strict=True)])
    codes = {u: i for i, u in enumerate(dict.fromkeys(uids))}
    groups = torch.tensor([codes[uids[i]] for i in ends])
    rewards = row_rewards[ends].double()
    zeros = torch.zeros(len(ends), dtype=torch.float64)
    return step_credit(zeros, rewards, groups, lengths, torch.tensor(list(states)), recipe)
