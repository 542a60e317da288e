"""The local trainer learns, checked where a wrong gradient would show: a short run after its
warm start beats the warm start on the same mazes, paired maze by maze, and in its captured
episodes, re-scored under both checkpoints, solved answers gained on their groups' failed ones
while the observations, outside the loss mask, moved less.

`benchmarks/bench_learning.py` measures the whole curve; this is its cheap guard in `make test`
(one thread, fixed seed). Deterministic on one machine, but another CPU's float kernels take
another trajectory, so the margins are sized for any seed. Measured on an AMD EPYC, 2 cores: 8
GRPO steps of 32 mazes gained -3 to +14 points on seeds 0-7 at 16 samples a maze (2 seeds
missed p < 0.05); 16 steps gained +15 to +27 on seeds 0-2 and 4-6, each at p < 2e-4. Mutation
runs (seed 0, temporary patches, reported in the issue that sized it): the advantage's sign
flipped -> -27.1 points; the prompts' text tokens in the loss with the episode's advantage ->
+10.0 points (p = 0.011), but observations +2.26 nats/token against a solved-minus-failed gain
of +0.16, so the re-score fails it (unmutated seeds 0, 1, 4: observations -0.000, +0.034,
-0.028 against +0.124, +0.109, +0.102). SkyRL's counterpart re-scores the suite's CPU run
(tests/skyrl/test_skyrl_cpu_run.py).
"""

from __future__ import annotations

import pytest

from rlkit.episodes.evaluate import compare
from rlkit.run import open_run
from rlkit.run.captures import capture_steps, read_step
from rlkit.train.presets import preset
from rlkit.train.rescore import rescore
from rlkit.train.trainer import train

GRPO_STEPS = 16
SETTINGS = {
    "grpo.mazes_per_step": 32,
    "grpo.lr_late": None,  # the recipe's early rate throughout: these steps are all early
    "schedule.steps": GRPO_STEPS,
    "schedule.eval_every": GRPO_STEPS,  # evals: the warm start's end and the end
    "schedule.eval_before_train": False,
    "schedule.eval_samples": 8,  # at 2 a maze the eval's own noise was +-6 points
    "schedule.ckpt_every": GRPO_STEPS,
    "schedule.capture_groups": 4,  # of 32 a step: ~450 episodes to re-score
    "schedule.threads": 1,
    "schedule.seed": 0,
}
P_MAX = 0.05


@pytest.mark.slow  # ~2 min: a warm start, 16 GRPO steps of 256 episodes, two evals, a re-score
def test_local_grpo_beats_its_warm_start_on_the_same_mazes(tmp_path):
    cfg = preset("local-tiny").with_overrides(SETTINGS)
    train(cfg, tmp_path / "run", progress=False)
    run = open_run(tmp_path / "run")
    evals = run.evals()
    start, end = run.warm_start_end(), max(evals)
    assert end - start == GRPO_STEPS
    paired = compare(evals[start], evals[end])
    assert paired.diff > 0 and paired.p_value < P_MAX, paired.verdict("warm start", "GRPO")
    episodes = [e for step in capture_steps(run.path) for e in read_step(run.path, step)]
    policy = {c.step: c.hf_export for c in run.checkpoints()}
    check = rescore(episodes, before=policy[start], after=policy[end], env=cfg.task.env)
    # within each group, solved episodes' answers gained on the failed ones', and the
    # observations, which the loss mask leaves out, moved less than that. Not `check.learned`:
    # the recipe gives every episode of an all-failed group -1, and as the policy improves those
    # episodes' many right moves gain too, so the advantage-weighted shift over 16 steps was
    # negative on runs that learned (seeds 1 and 4: -0.013 and -0.026 nats/token)
    assert check.solved_gain > 0, check.summary()
    assert abs(check.observation_weighted) < check.solved_gain, check.summary()
