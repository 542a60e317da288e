"""The difficulty curriculum (`recipe.curriculum_steps`): the schedule and the moved starts by
hand, the local step's mazes at their stage, and a resumed smoke run at the same stage."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from rlkit.episodes.policies import EpsOraclePolicy
from rlkit.errors import UsageError
from rlkit.maze.core import difficulty, exit_distances, neighbours, shortest_path
from rlkit.maze.sets import (
    curriculum_share,
    draw_train_mazes,
    nearer_start,
    pinned_set,
    pinned_spec,
    train_maze,
    train_mazes,
    turns_to_solve,
)
from rlkit.recipe import Recipe
from rlkit.train import step as st
from rlkit.train.config import apply_recipe
from rlkit.train.presets import preset
from rlkit.train.state import TrainState
from rlkit.train.trainer import Trainer, train


def test_the_schedule_by_hand():
    # Expected: 0.25 + 0.75 * s / 4 for s < 4, then 1
    assert [curriculum_share(s, 4, 0.25) for s in range(6)] == [0.25, 0.4375, 0.625, 0.8125, 1, 1]
    assert curriculum_share(0, None, 0.25) == 1.0  # off
    assert curriculum_share(3, 1, 0.5) == 1.0


@pytest.mark.parametrize(
    ("name", "index", "moves"),
    [("test", 2, 6), ("visgym-easy", 0, 12)],  # a cells maze and a VisGym squares maze
)
def test_a_moved_start_keeps_a_share_of_the_shortest_path(name, index, moves):
    maze = train_maze(pinned_spec(name), index)
    path = shortest_path(maze)
    assert len(path) - 1 == moves
    for share in (0.1, 0.25, 0.5, 0.9):
        moved = nearer_start(maze, share)
        keep = max(1, math.ceil(share * moves))  # Expected: 6 -> 1, 2, 3, 6; 12 -> 2, 3, 6, 11
        assert difficulty(moved).path_length == keep
        assert moved.start == path[-1 - keep] and moved.exit == maze.exit
        assert (moved.walls == maze.walls).all() and moved.game == maze.game
    assert nearer_start(maze, 1.0) is maze


def test_a_moved_start_never_makes_a_test_maze():
    test_maze = pinned_set("test")[0]
    d = int(exit_distances(test_maze)[test_maze.start])
    behind = next(  # the test maze with its start one move farther back
        m
        for _, c in neighbours(test_maze.start, test_maze.height, test_maze.width)
        for m in [replace(test_maze, start=c, meta={})]
        if shortest_path(m)[1] == test_maze.start
    )
    share = d / (d + 1)  # keeps d moves: exactly the test maze
    assert nearer_start(behind, share) is behind
    assert difficulty(nearer_start(behind, (d - 1) / (d + 1))).path_length == d - 1


def _curriculum(steps: int = 4, start: float = 0.25):
    return apply_recipe(preset("smoke"), {"curriculum_steps": steps, "curriculum_start": start})


def test_the_local_step_plays_its_stages_mazes_from_the_cursor():
    cfg = _curriculum()
    n = cfg.grpo.mazes_per_step
    state = TrainState(phase="grpo", grpo_steps=2, cursor=8)
    assert st.curriculum(cfg, state) == 0.625
    trajs = st.rollout_round(EpsOraclePolicy(0.0), cfg, state, 0, 0)
    assert state.cursor == 8 + n
    whole = train_mazes(cfg.task.spec, 8, n)
    got = {t.maze_index: difficulty(t.maze_obj).path_length for t in trajs}
    # Expected: ceil(0.625 * L) of each of the stream's mazes 8..11
    assert got == {i: math.ceil(0.625 * difficulty(m).path_length) for i, m in enumerate(whole)}
    state.grpo_steps = 4  # the schedule's end: the task's own mazes
    assert st.curriculum(cfg, state) == 1.0
    full = st.rollout_round(EpsOraclePolicy(0.0), cfg, state, 0, 0)
    assert [t.maze for t in full[:: cfg.grpo.group_size]] == [
        m.to_dict() for m in train_mazes(cfg.task.spec, 8 + n, n)
    ]


def test_switch_checks_and_backends():
    with pytest.raises(UsageError, match="curriculum_steps"):
        Recipe(curriculum_steps=0)
    with pytest.raises(UsageError, match="curriculum_start"):
        Recipe(curriculum_start=0.0)
    r = Recipe(curriculum_steps=10)
    assert r.refusals("local") == [] and r.refusals("skyrl") == []
    assert not any("curriculum" in o for o in r.skyrl_overrides())  # rlkit's rows, not SkyRL's
    (line,) = replace(r, dynamic_sampling_type="filter").refusals("skyrl")
    assert line.startswith("recipe.curriculum_steps with dynamic_sampling_type")


def test_a_resumed_run_trains_the_same_stages(tmp_path):
    cfg, split = _curriculum(), tmp_path / "split"
    Trainer(cfg, split, progress=False).fit(stop_at_step=6)  # warm start 4 + 2 GRPO steps
    train(cfg, split, progress=False)  # resumes from global_step_6

    def stages(run_dir):
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [
            (r["step"], r["train/cursor"], r["train/curriculum"])
            for r in rows
            if "train/curriculum" in r
        ]

    # Expected: GRPO steps 1..4 (global 5..8) at 0.25, 0.4375, 0.625, 0.8125, each taking
    # 4 mazes (the cursor after the step)
    expected = [(5, 4, 0.25), (6, 8, 0.4375), (7, 12, 0.625), (8, 16, 0.8125)]
    assert stages(split) == expected


def test_slots_pass_over_mazes_no_episode_can_solve_and_a_hard_share_over_short_ones():
    spec = pinned_spec("visgym-easy")
    plain, end = draw_train_mazes(spec, 5, 8)
    assert plain == train_mazes(spec, 5, 8) and end == 13
    mazes, end = draw_train_mazes(spec, 5, 8, hard=0.5, min_path=14)
    lengths = [difficulty(m).path_length for m in mazes]
    assert all(n >= 14 for n in lengths[1::2]) and end > 13  # every other slot, short ones passed
    assert (mazes, end) == draw_train_mazes(spec, 5, 8, hard=0.5, min_path=14)  # a pure function
    assert mazes[0] == train_maze(spec, 5)
    fits, end = draw_train_mazes(spec, 0, 40, max_turns=18)  # VisGym easy's budget
    assert all(turns_to_solve(m) <= 18 for m in fits) and end > 40  # 20-move mazes passed over
    assert max(turns_to_solve(train_maze(spec, i)) for i in range(end)) > 18
    with pytest.raises(UsageError, match="a shortest way that fits 1 turns: raise task.env"):
        draw_train_mazes(spec, 0, 1, max_turns=1)
    with pytest.raises(UsageError, match="lower grpo.hard_min_path") as e:
        draw_train_mazes(spec, 0, 2, hard=1.0, min_path=80)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="grpo.hard_share"):
        preset("local-tiny-visgym").with_overrides({"grpo.hard_share": 1.5})
