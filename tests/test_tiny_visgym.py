"""The seed's task for the tiny model (`local-tiny-visgym`): VisGym's picture drawn with a one-
square wall pad so that every 16 px vision patch holds one cell and its passages, and the warm
start's open-square states, distance curriculum and dense per-square loss."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rlkit.env.maze_env import env_for_set
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.core import STOP, exit_distances
from rlkit.maze.render import RenderStyle, render_array
from rlkit.maze.sets import pinned_set, pinned_spec
from rlkit.train.config import WarmStartConfig
from rlkit.train.presets import preset
from rlkit.train.square_head import IGNORE, square_labels
from rlkit.train.trainer import Trainer, train
from rlkit.train.warmstart import bc_distance, open_square_states


def test_a_padded_picture_is_visgyms_with_a_wall_border_right_and_below():
    style = replace(env_for_set("visgym-easy").style, cell_px=8)
    state = rules.initial(pinned_set("visgym-easy")[0])
    plain = render_array(state, style)
    padded = render_array(state, replace(style, pad=1))
    assert plain.shape == (72, 72, 3) and padded.shape == (80, 80, 3)
    assert np.array_equal(padded[:72, :72], plain)
    border = np.concatenate([padded[72:].reshape(-1, 3), padded[:, 72:].reshape(-1, 3)])
    assert (border == np.array(style.wall, np.uint8)).all()
    with pytest.raises(UsageError, match=r"pad \(9\) must be 0..4"):
        RenderStyle(pad=9)


def _floor(maze):
    return [(int(r), int(c)) for r, c in np.argwhere(~maze.squares)]


def test_square_labels_are_the_oracles_answer_on_every_floor_square():
    maze = pinned_set("visgym-easy")[3]
    choices = rules.game_moves(maze)
    labels = square_labels(maze, pad=1, block=2, choices=choices)
    assert labels.shape == (25, 4)  # 5 x 5 patches of 2 x 2 squares
    grid = labels.reshape(5, 5, 2, 2).transpose(0, 2, 1, 3).reshape(10, 10)
    floor = _floor(maze)
    assert (grid != IGNORE).sum() == len(floor)
    for r, c in floor:
        state = rules.State(maze=maze, pos=(r, c), trail=((r, c),))
        assert choices[grid[r, c]] == rules.best_move(state)
    assert choices[grid[maze.exit]] == STOP


def test_open_square_states_draw_the_floor_near_the_target_first():
    spec = pinned_spec("visgym-easy")
    states = open_square_states(spec, step=0, batch=64, seed=0, per_maze=8)
    assert states == open_square_states(spec, step=0, batch=64, seed=0, per_maze=8)
    assert all(a == rules.best_move(s) for s, a, _ in states)
    assert any(a == STOP for _, a, _ in states)
    notes = [n for _, _, n in states]
    assert any(n.startswith("You moved") for n in notes) and any("into a wall" in n for n in notes)
    near = open_square_states(spec, step=0, batch=64, seed=0, per_maze=8, max_distance=3)
    assert max(exit_distances(s.maze)[s.pos] for s, _, _ in near) <= 3
    w = WarmStartConfig(states="open", curriculum_steps=100)
    assert [bc_distance(w, s) for s in (0, 50, 99, 100)] == [2, 17, 31, None]
    assert bc_distance(WarmStartConfig(states="open"), 0) is None


def _small_cfg():
    cfg = preset("local-tiny-visgym")
    return cfg.with_overrides(
        {
            "model.tiny.hidden": 32, "model.tiny.layers": 1, "model.tiny.heads": 2,
            "model.tiny.kv_heads": 1, "model.tiny.intermediate": 64,
            "model.tiny.vision_hidden": 32, "model.tiny.vision_heads": 2,
            "model.tiny.vision_depth": 2, "warm_start.batch": 16, "warm_start.max_steps": 4,
            "warm_start.check_every": 2, "warm_start.val_samples": 1, "warm_start.stop_at": 1.0,
            "warm_start.curriculum_steps": 2, "grpo.mazes_per_step": 2, "grpo.group_size": 2,
            "schedule.steps": 1, "schedule.eval_samples": 1, "schedule.ckpt_every": 1,
            "schedule.threads": 1,
        }
    )  # fmt: skip


def test_the_square_head_trains_beside_bc_then_on_through_grpo_and_resumes(tmp_path):
    """The dense loss joins BC (its own metric); with `grpo.aux_weight` it goes on after each
    GRPO step as steps of its own (`grpo.aux_steps`); its head (and in GRPO its optimizer) is
    checkpointed, and a run stopped mid warm start and again mid GRPO ends as an uninterrupted
    one."""
    cfg = _small_cfg().with_overrides(
        {"grpo.aux_weight": 1.0, "grpo.aux_steps": 2, "schedule.steps": 2}
    )
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(cfg, straight, progress=False)
    for stop, keys in ((2, {"square_head"}), (5, {"square_head", "tower_optimizer"})):
        Trainer(cfg, split, progress=False).fit(stop_at_step=stop)
        saved = torch.load(split / f"global_step_{stop}" / "trainer_state.pt", weights_only=False)
        assert keys <= saved.keys()
    train(cfg, split, progress=False)
    rows = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss/bc_squares"]) for r in rows if "loss/bc" in r)
    assert [r["step"] for r in rows if "loss/grpo_squares" in r] == [5, 6]
    a, b = (
        load_file(str(d / "global_step_6" / "policy" / "model.safetensors"))
        for d in (straight, split)
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (straight / "global_step_6" / "policy" / "square_head").exists()


def test_a_layout_the_head_cannot_label_is_refused_in_one_line(tmp_path):
    cfg = _small_cfg().with_overrides({"model.tiny.merge": 2, "model.tiny.patch_size": 8})
    with pytest.raises(UsageError, match="aux_weight needs the squares game") as e:
        train(cfg, tmp_path, progress=False)
    assert "\n" not in str(e.value)


def test_the_grpo_square_step_moves_the_vision_tower_and_nothing_else(tmp_path):
    from rlkit.model.build import build_tiny
    from rlkit.model.load import load
    from rlkit.train.square_head import SquareHead, block_side, squares_update, tower_optimizer
    from rlkit.train.warmstart import bc_batch

    cfg = _small_cfg()
    loaded = load(build_tiny(tmp_path / "m", seed=0, config=cfg.model.tiny))
    maze = pinned_set("visgym-easy")[0]
    head = SquareHead(loaded, block_side(loaded, cfg.task.env, maze), rules.game_moves(maze))
    prompts, _, mazes = bc_batch(loaded, cfg.task.spec, cfg.task.env, 0, cfg.warm_start, 0)
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    opt = tower_optimizer(loaded, head)
    out = squares_update(
        loaded, head, opt, [(prompts, mazes, cfg.task.env.style.pad)], weight=1.0, lr=1e-3
    )
    assert np.isfinite(out["loss/grpo_squares"])
    after = loaded.model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(".visual." in f".{k}" for k in moved)
    assert all(p.grad is None for p in loaded.model.parameters())


@pytest.mark.parametrize("tuning", [{"model.lora_rank": 4}, {"model.freeze_vision": "tower"}])
def test_the_grpo_square_loss_is_refused_on_a_fixed_tower(tuning):
    with pytest.raises(UsageError, match="grpo.aux_weight trains the vision tower") as e:
        _small_cfg().with_overrides({"grpo.aux_weight": 1.0, **tuning})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"grpo.aux_weight": 1.0, "grpo.aux_steps": 0}, r"grpo.aux_steps \(0\) >= 1"),
        ({"warm_start.aux_weight": 0.0, "warm_start.tower_steps": 5}, "set warm_start.aux_weight"),
    ],
)
def test_square_loss_settings_out_of_range_are_refused_in_one_line(changes, says):
    with pytest.raises(UsageError, match=says) as e:
        _small_cfg().with_overrides(changes)
    assert "\n" not in str(e.value)


def test_tower_steps_train_the_square_loss_alone_before_bc(tmp_path):
    """The first `tower_steps` warm-start steps move only the vision tower (and the head) and
    validate nothing; behaviour cloning and its checks start after them."""
    cfg = _small_cfg().with_overrides({"warm_start.tower_steps": 2, "warm_start.max_steps": 4})
    Trainer(cfg, tmp_path, progress=False).fit(stop_at_step=2)
    init = load_file(str(tmp_path / "init_model" / "model.safetensors"))
    after = load_file(str(tmp_path / "global_step_2" / "policy" / "model.safetensors"))
    moved = {k for k in init if not torch.equal(init[k], after[k])}
    assert moved and all(".visual." in f".{k}" for k in moved)
    train(cfg, tmp_path, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    checked = [r["step"] for r in rows if "train/val_solve_rate" in r]
    assert checked and min(checked) > 2
