"""GiGPO's step-level credit on SkyRL (`advantage_estimator=gigpo` with a history window): the
estimator registered with SkyRL's registry, each row's step level worked by hand, and SkyRL's own
step-wise `compute_advantages_and_returns` in `RlkitTrainer` giving every row its episode's GRPO
advantage plus its step level, as the local trainer's `step_credit` computes per turn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg

from rlkit.cluster.skyrl.entry import register_gigpo
from rlkit.cluster.skyrl.experiment import RlkitTrainer, step_terms
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.cluster.skyrl.window import STATES_KEY
from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.train import grpo

HAND = Recipe(advantage_estimator="gigpo", gigpo_gamma=0.5, grpo_norm_by_std=False)
# one group (maze "a"): episode 1 solves in 2 turns from (1, 1) via (1, 2); episode 2 fails in
# 3 turns from (1, 1) via (2, 1), (3, 1)
UIDS = ["a"] * 5
LAST = [False, True, False, False, True]
STATES = [(1, 1), (1, 2), (1, 1), (2, 1), (3, 1)]
ROW_REWARDS = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])


def test_step_terms_by_hand():
    """Returns at gamma 0.5: episode 1 [0.5, 1.0], episode 2 [0, 0, 0]. Only (1, 1) is
    shared: its mean 0.25, so +0.25 and -0.25; squares stood on once get 0."""
    got = step_terms(UIDS, LAST, ROW_REWARDS, STATES, HAND)
    assert got.tolist() == pytest.approx([0.25, 0.0, -0.25, 0.0, 0.0])
    weighted = step_terms(UIDS, LAST, ROW_REWARDS, STATES, replace(HAND, gigpo_step_weight=2.0))
    assert weighted.tolist() == pytest.approx([0.5, 0.0, -0.5, 0.0, 0.0])


def config(**changes) -> SkyRLTrainConfig:
    register_gigpo()
    preset = get_preset("skyrl-tiny-cpu", history=2, recipe={"advantage_estimator": "gigpo"})
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "g"))
    for key, value in changes.items():
        setattr(cfg.trainer.algorithm, key, value)
    return cfg


def test_the_preset_validates_with_skyrls_classes_and_needs_a_window():
    cfg = config()
    validate_cfg(cfg)
    assert cfg.trainer.algorithm.advantage_estimator == "gigpo"
    assert cfg.generator.step_wise_trajectories
    with pytest.raises(UsageError, match="gigpo .* set history"):
        get_preset("skyrl-tiny-cpu", recipe={"advantage_estimator": "gigpo"})


def test_rows_get_the_episode_advantage_plus_their_step_level():
    """Two groups of two episodes, SkyRL's padding row at the end; each answer token of a row
    gets what the local trainer's `step_credit` gives its turn."""
    uids = ["a", "a", "a", "a", "a", "b", "b", "b"]
    last = [False, True, False, False, True, True, False, True]
    states = [(1, 1), (1, 2), (1, 1), (2, 1), (3, 1), (5, 5), (5, 5), (5, 6)]
    row_rewards = [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    n, width = len(uids), 3
    mask = torch.ones(n + 1, width)
    mask[0, 2] = 0  # a shorter answer
    rewards = torch.zeros(n + 1, width)
    rewards[:n, 1] = torch.tensor(row_rewards)
    batch = TrainingInputBatch({"rewards": rewards, "response_mask": mask, "values": None})
    batch.metadata = {
        "uids": [*uids, "pad0"],
        "is_last_step": [*last, True],
        STATES_KEY: [list(s) for s in states],
        "pad_size": 1,
        "avg_response_length": 3.0,
    }
    trainer = RlkitTrainer.__new__(RlkitTrainer)
    trainer.cfg, trainer.all_metrics = config(), {}
    trainer.gigpo = Recipe(advantage_estimator="gigpo", gigpo_gamma=0.9)
    out = trainer.compute_advantages_and_returns(batch)

    lengths = torch.tensor([2, 3, 1, 2])
    episode_rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1])
    episode_adv = grpo.group_advantages(episode_rewards, groups)
    expected = grpo.step_credit(
        episode_adv, episode_rewards, groups, lengths, torch.tensor(states), trainer.gigpo
    )
    got = out["advantages"][:n]
    assert torch.allclose(got[:, 1], expected, atol=1e-5)
    assert torch.allclose(got * mask[:n], got) and got[0, 2] == 0  # answer tokens only
    assert float(np.abs(out["advantages"][n]).sum()) == 0.0  # the padding row
    assert trainer.all_metrics["policy/gigpo_step_abs_mean"] > 0
