"""The local trainer learns, checked where a wrong gradient would show: a short run after its
warm start beats the warm start on the same mazes, paired maze by maze.

`benchmarks/bench_learning.py` measures the whole curve; this is its cheap, deterministic
guard in `make test` (one thread, fixed seed). Mutation runs (reported in the issue that added
it): with the advantage's sign flipped the final is significantly *worse* than the warm start,
so the check cannot pass while GRPO pushes the wrong way. SkyRL's counterpart re-scores the
suite's CPU run (tests/skyrl/test_skyrl_cpu_run.py, `rlkit.train.rescore`).
"""

from __future__ import annotations

import pytest

from rlkit.episodes.evaluate import compare
from rlkit.run import open_run
from rlkit.train.presets import preset
from rlkit.train.trainer import train

GRPO_STEPS = 8
SETTINGS = {
    "grpo.mazes_per_step": 32,
    "grpo.lr_late": None,  # the recipe's early rate throughout: 8 steps are all early
    "schedule.steps": GRPO_STEPS,
    "schedule.eval_every": GRPO_STEPS,  # evals: the warm start's end and the end
    "schedule.eval_before_train": False,
    "schedule.eval_samples": 2,
    "schedule.ckpt_every": GRPO_STEPS,
    "schedule.capture_groups": 0,
    "schedule.threads": 1,
    "schedule.seed": 0,
}
P_MAX = 0.05


@pytest.mark.slow  # ~1 min: a warm start, 8 GRPO steps of 256 episodes, two evals
def test_local_grpo_beats_its_warm_start_on_the_same_mazes(tmp_path):
    train(preset("local-tiny").with_overrides(SETTINGS), tmp_path / "run", progress=False)
    run = open_run(tmp_path / "run")
    evals = run.evals()
    start, final = evals[run.warm_start_end()], evals[max(evals)]
    assert max(evals) - run.warm_start_end() == GRPO_STEPS
    paired = compare(start, final)
    verdict = paired.verdict("warm start", "GRPO")
    assert paired.diff > 0 and paired.p_value < P_MAX, verdict
