"""One captured group worked by hand (notebook 03): hand-computed values, each rule named, the
same numbers as the trainer's own advantage function, and a real smoke run's captured group."""

import math

import pytest
import torch

from rlkit.episodes.rollout import Trajectory
from rlkit.errors import UsageError
from rlkit.notebook import groups
from rlkit.run.captures import CapturedEpisode
from rlkit.train.grpo import group_advantages


def captured(rewards, advantages, group=3, step=12):
    return [
        CapturedEpisode(step, group, a, Trajectory(maze={}, maze_index=group, sample=i, reward=r))
        for i, (r, a) in enumerate(zip(rewards, advantages, strict=True))
    ]


REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
# mean 3/8 = 0.375; Bessel std = sqrt((3 * 0.625^2 + 5 * 0.375^2) / 7) = sqrt(1.875 / 7) = 0.517549
# solved: 0.625 / (0.517549 + 1e-6) = 1.207612; failed: -0.375 / (0.517549 + 1e-6) = -0.724567
HAND = [1.207612 if r else -0.724567 for r in REWARDS]


def test_a_mixed_group_is_worked_to_the_advantages_the_loss_used():
    view = groups.from_episodes(captured(REWARDS, HAND))
    assert view.mean == 0.375 and view.std == pytest.approx(math.sqrt(1.875 / 7))
    assert view.by_hand() == pytest.approx(HAND, abs=1e-6)
    assert view.rule == groups.RULES["grpo"] and (view.step, view.group) == (12, 3)
    table = view.table()
    assert "training step 12, group 3" in table and "+1.208" in table and "-0.725" in table
    assert table.splitlines()[-1].startswith("rule: plain GRPO")


def test_the_hand_formula_is_the_trainers_own():
    r = torch.tensor(REWARDS)
    trainer = group_advantages(r, torch.zeros(8, dtype=torch.long)).tolist()
    assert groups.from_episodes(captured(REWARDS, trainer)).by_hand() == pytest.approx(trainer)


@pytest.mark.parametrize(
    ("rewards", "advantages", "rule"),
    [
        ([1.0, 0.0, 1.0, 1.0], [0.25, -0.75, 0.25, 0.25], "mean"),  # Dr. GRPO: r - 0.75
        ([1.0] * 4, [0.0] * 4, "dropped"),  # all solved: nothing to prefer
        ([0.0] * 4, [-1.0] * 4, "fail"),  # all failed, local fail_advantage = -1
        ([1.0, 0.0, 1.0, 1.0], [2.0, 0.0, 0.0, 0.0], "other"),
    ],
)
def test_each_rule_is_named(rewards, advantages, rule):
    assert groups.match_rule(rewards, advantages) == rule


def test_the_group_that_differs_is_picked_and_bad_picks_are_one_line():
    eps = captured([1.0] * 4, [0.0] * 4, group=1) + captured(REWARDS, HAND, group=5)
    assert groups.from_episodes(eps).group == 5  # the one the formula is about
    assert groups.from_episodes(eps, group=1).rule == groups.RULES["dropped"]
    with pytest.raises(UsageError, match=r"captured groups \[1, 5\], not 2"):
        groups.from_episodes(eps, group=2)
    with pytest.raises(UsageError, match="captured no episodes"):
        groups.from_episodes([])


class Captured:
    """A run's captured steps as `worked_group` reads them (`Run.capture_steps`, `captures`):
    {step: its episodes, or the error reading it raises}."""

    name = "run"

    def __init__(self, steps):
        self.steps = steps

    def capture_steps(self):
        return sorted(self.steps)

    def captures(self, step):
        if isinstance(self.steps[step], Exception):
            raise self.steps[step]
        return self.steps[step]


def test_the_worked_group_is_the_newest_mixed_one_when_late_steps_all_solve():
    solved = captured([1.0] * 4, [0.0] * 4, group=1, step=30)
    run = Captured(
        {
            10: captured(REWARDS, HAND, group=2, step=10),
            20: captured([1.0] * 4, [0.0] * 4, group=0, step=20)
            + captured(REWARDS, HAND, group=4, step=20),
            30: solved,
            40: UsageError("step 40 was not brought"),
        }
    )
    view = groups.worked_group(run)
    assert (view.step, view.group, view.rule) == (20, 4, groups.RULES["grpo"])
    assert groups.worked_group(run, step=30).rule == groups.RULES["dropped"]  # asked for
    late = Captured({30: solved, 40: UsageError("not brought")})
    assert groups.worked_group(late).step == 30  # none mixed: the newest readable
    with pytest.raises(UsageError, match="not brought"):
        groups.worked_group(Captured({40: UsageError("not brought")}))
