"""The SkyRL CPU run's captured training rollouts: every trained step's groups, read back as
a researcher reads them (`open_run(run).captures(step)`), each turn with the engine's move
probabilities (tests/skyrl/cpu_run.py: 3 steps, killed after step 2 and resumed).

What the generator writes is checked exactly with a scripted engine in test_generator.py; here
the real engines answer: SkyRL's vLLM servers behind its router, the warm-started tiny model.
"""

from __future__ import annotations

import pandas as pd
import pytest
from cpu_run import STEPS
from cpu_run import TIMEOUT as RUN_TIMEOUT

from rlkit.env.maze_env import maze_from_extras
from rlkit.maze.core import Action, Maze
from rlkit.run.captures import step_path
from rlkit.run.reader import open_run
from rlkit.run.rundir import RunDir

pytestmark = pytest.mark.timeout(RUN_TIMEOUT)  # the first test pays for the run

GROUPS, GROUP_SIZE = 2, 4
"""The CPU preset's capture (2 of a step's 4 groups) and its GRPO group size."""


def test_each_trained_step_has_its_groups_with_move_probs(skyrl_cpu_run):
    run = open_run(skyrl_cpu_run.run_dir)
    assert run.capture_steps() == list(range(1, STEPS + 1))  # the resumed step 3 too
    rows = pd.read_parquet(skyrl_cpu_run.run_dir / "data" / "train.parquet")
    metrics: dict[int, dict] = {}  # a step's training and eval records, merged
    for r in RunDir(skyrl_cpu_run.run_dir).read_metrics():
        metrics.setdefault(r["step"], {}).update(r)
    with_probs = turns = 0
    for step in range(1, STEPS + 1):
        episodes = run.captures(step)
        groups = sorted({e.group for e in episodes})
        assert len(groups) == GROUPS and len(episodes) == GROUPS * GROUP_SIZE
        for group in groups:
            mine = [e for e in episodes if e.group == group]
            assert sorted(e.trajectory.sample for e in mine) == list(range(GROUP_SIZE))
            assert sum(e.advantage for e in mine) == pytest.approx(0.0, abs=1e-5)
            # the group is the training row the episodes played (SkyRL's uid)
            row = rows.iloc[group].to_dict()
            want = maze_from_extras(row).content_hash
            assert all(Maze.from_dict(e.trajectory.maze).content_hash == want for e in mine)
        for e in episodes:
            t = e.trajectory
            assert t.reward in (0.0, 1.0) and t.terminated == (t.reward == 1.0)
            assert t.turns and all(x.text is not None for x in t.turns)
            if t.terminated:  # SkyRL's reward and rlkit's replay agree
                assert t.turns[-1].pos_after == Maze.from_dict(t.maze).exit
            for x in t.turns:
                turns += 1
                # vLLM 0.32 serves the four words' logprobs: every tag gets its bars
                assert (x.move_probs is not None) == ("<action>" in x.text), x.text
                if x.move_probs is None:
                    continue
                with_probs += 1
                assert sum(x.move_probs) == pytest.approx(1.0, abs=1e-3)
                if len(x.actions) == 1:  # the move it took had some probability
                    assert x.move_probs[Action[x.actions[0].upper()]] > 0
        m = metrics[step]
        assert m["rollout/capture_episodes"] == len(episodes)
        assert m["rollout/capture_bytes"] == step_path(skyrl_cpu_run.run_dir, step).stat().st_size
        assert m["rollout/capture_probe_misses"] == sum(
            x.move_probs is None for e in episodes for x in e.trajectory.turns
        )
        assert m["rollout/capture_errors"] == 0
    assert with_probs >= turns / 2, f"only {with_probs} of {turns} turns opened an action tag"
