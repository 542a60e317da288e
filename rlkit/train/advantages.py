"""GRPO's group-relative advantages, and which groups teach: small, pure tensor functions.

An episode's advantage compares its outcome reward with the other episodes of its group (the
same maze), instead of a critic's value: `A_i = (r_i - mean(r)) / std(r)` (Shao et al. 2024).
These follow SkyRL's `compute_grpo_outcome_advantage`; `tests/skyrl/test_objective.py` checks
them against SkyRL's own code.

- **Estimators are a registry** (`ESTIMATORS`, SkyRL's names; `estimate` looks the recipe's
  `advantage_estimator` up): `grpo` only, the others SkyRL runs.
- **Std division is optional** (`norm_by_std`, the recipe's `grpo_norm_by_std`). Dr. GRPO
  (Liu et al. 2025) shows that dividing by the group std up-weights groups that are nearly
  all-solved or all-failed; without it the advantage is only mean-centred. With it, std is the unbiased (Bessel) std plus `eps=1e-6`,
  as SkyRL computes it.
- **Zero-variance groups** (every episode of a maze got the same reward) have all-zero
  advantages; `nonzero_variance_mask` lets the trainer drop them from the loss and from the
  token count, as SkyRL's `zero_variance_filter` does for response-level rewards (its VLM
  generator's are per token, so a SkyRL preset refuses the switch). The local trainer can instead give the
  groups that no episode solved (`unsolved_group_mask`) a fixed negative advantage
  (`Recipe.fail_advantage`, negative-sample reinforcement); SkyRL has no such option.

Where this differs from SkyRL (each shown by a test):

- **A group of one episode is rejected.** SkyRL gives it mean 0 and std 1, so its raw reward
  becomes its advantage (0.75 -> 0.75 / (1 + 1e-6)).
- **Group statistics are float64**, so a zero-variance group gets exactly 0. SkyRL's float32 mean
  of eight rewards of 0.1 is one ulp off, which dividing by std + eps = 1e-6 turns into
  advantages of -0.0074. The maze's 0/1 rewards are exact in both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlkit.errors import UsageError
from rlkit.recipe import Recipe


def _check_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Validate episode-level inputs; return (inverse index into groups, number of groups)."""
    if rewards.ndim != 1 or group_ids.ndim != 1:
        raise UsageError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must be 1-D "
            "(one entry per episode)"
        )
    if rewards.shape != group_ids.shape:
        raise UsageError(
            f"rewards ({rewards.numel()}) and group_ids ({group_ids.numel()}) must have one "
            "entry per episode each"
        )
    if rewards.numel() == 0:
        raise UsageError("rewards is empty: pass at least one group of episodes")
    if not torch.isfinite(rewards).all():
        raise UsageError("rewards contain NaN or inf: check the env's reward before GRPO")
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if int(counts.min()) < 2:
        raise UsageError(
            f"group_size ({int(counts.min())}) must be >= 2: GRPO compares episodes within a group"
        )
    return inverse, int(counts.numel())


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantage of each episode.

    rewards: (B,) float, one outcome reward per episode. group_ids: (B,) int, episodes of the same
    maze share an id (any integers, any order). Returns (B,) float:
    `r_i - mean_g` or, with `norm_by_std`, `(r_i - mean_g) / (std_g + eps)` with the unbiased std.
    """
    inverse, n_groups = _check_groups(rewards, group_ids)
    r = rewards.detach().to(torch.float64)
    counts = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, torch.ones_like(r))
    sums = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, r)
    means = sums / counts
    centred = r - means[inverse]
    if norm_by_std:
        sq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, centred**2)
        std = torch.sqrt(sq / (counts - 1))
        centred = centred / (std[inverse] + eps)
    return centred.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def _grpo(rewards: torch.Tensor, group_ids: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    return group_advantages(rewards, group_ids, norm_by_std=recipe.grpo_norm_by_std)


ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor, Recipe], torch.Tensor]] = {
    "grpo": _grpo,
}
"""Advantage estimators under SkyRL's names: `fn(rewards (B,), group_ids (B,), recipe) -> (B,)`."""


def estimate(rewards: torch.Tensor, group_ids: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Each episode's advantage by the recipe's `advantage_estimator` (B,) -> (B,)."""
    if recipe.advantage_estimator not in ESTIMATORS:
        raise UsageError(
            f"recipe.advantage_estimator {recipe.advantage_estimator!r}: the local trainer has "
            f"{', '.join(ESTIMATORS)}"
        )
    return ESTIMATORS[recipe.advantage_estimator](rewards, group_ids, recipe)


def nonzero_variance_mask(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, tol: float = 1e-6
) -> torch.Tensor:
    """Which episodes belong to a group whose rewards differ (spread max - min > tol).

    rewards, group_ids: (B,). Returns (B,) bool. A group where every episode got the same reward
    has zero advantage everywhere: it adds no gradient, only tokens to the `token_mean` count.
    """
    if tol < 0:
        raise UsageError(f"tol ({tol}) must be >= 0: it is the reward spread treated as equal")
    hi, lo, inverse = _group_range(rewards, group_ids)
    return ((hi - lo) > tol)[inverse]


def unsolved_group_mask(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Which episodes belong to a group where no episode scored (every reward <= 0): with the
    0/1 solve reward, the mazes whose whole group failed. rewards, group_ids: (B,) -> (B,) bool."""
    hi, _, inverse = _group_range(rewards, group_ids)
    return (hi <= 0)[inverse]


def _group_range(
    rewards: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group (max, min) of the rewards, and each episode's group position."""
    inverse, n_groups = _check_groups(rewards, group_ids)
    r = rewards.detach().to(torch.float64)
    hi = torch.full((n_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, inverse, r, reduce="amax"
    )
    lo = torch.full((n_groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, inverse, r, reduce="amin"
    )
    return hi, lo, inverse
