"""The difficulty curriculum on SkyRL: the entry writes the training rows in step order, each
maze at its step's share of the shortest path, and the trainer `RlkitExp` builds reads them in
that order (SkyRL's own loader shuffles) and resumes at the row it reached. SkyRL's own
`RayPPOTrainer.__init__` and `PromptDataset` run here (step-level credit on SkyRL:
test_gigpo_skyrl.py)."""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import pytest
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.utils.trainer_utils import build_dataloader

from rlkit.cluster.skyrl.entry import curriculum_shares, ensure_datasets
from rlkit.cluster.skyrl.experiment import RlkitExp
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.data import read_rows
from rlkit.env.maze_env import env_for_set
from rlkit.maze.core import Maze, difficulty
from rlkit.maze.sets import draw_train_mazes, pinned_spec
from rlkit.recipe import Recipe


@pytest.fixture(autouse=True)
def _root_logging(monkeypatch):
    """RayPPOTrainer.__init__ routes stdlib logging through loguru; not for the session."""
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """The smoke preset over 4 steps, its curriculum over the first 2 from a quarter path."""
    base = get_preset("qwen3vl-2b-smoke", runs_root=str(tmp_path_factory.mktemp("runs")), steps=4)
    return replace(base, recipe=replace(base.recipe, curriculum_steps=2, curriculum_start=0.25))


def test_each_row_is_written_at_its_steps_share(preset, tmp_path):
    n = preset.prompts_per_step
    shares = curriculum_shares(preset)
    # Expected: steps 0, 1 at 0.25, 0.625; steps 2, 3 the whole maze; n rows a step
    assert shares == [0.25] * n + [0.625] * n + [1.0] * (2 * n)
    assert curriculum_shares(replace(preset, recipe=Recipe())) is None
    train, _ = ensure_datasets(
        str(tmp_path), preset.train_rows, preset.task.eval_set, 4, None, shares
    )
    rows = read_rows(train)
    spec, turns = pinned_spec(preset.task.eval_set), env_for_set(preset.task.eval_set).max_turns
    whole, _ = draw_train_mazes(spec, 0, preset.train_rows, max_turns=turns)
    for row, share, maze in zip(rows, shares, whole, strict=True):
        moved = Maze.from_dict(row["extra_info"]["maze"])
        expected = max(1, math.ceil(share * difficulty(maze).path_length))
        assert difficulty(moved).path_length == row["extra_info"]["path_length"] == expected
        assert moved.exit == maze.exit and (moved.walls == maze.walls).all()


def test_the_trainer_reads_the_rows_in_order_and_resumes_at_its_row(preset, tokenizer):
    paths = RunPaths.for_run(preset, "curriculum")
    shares = curriculum_shares(preset)
    ensure_datasets(paths.data_dir, preset.train_rows, preset.task.eval_set, 4, None, shares)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "curriculum"))
    cfg.generator.inference_engine.enable_ray_prometheus_stats = False
    cfg.trainer.enable_ray_gpu_monitor = False
    cfg.data.dataloader.num_workers = 0
    ds = PromptDataset(cfg.data.train_data, tokenizer, cfg.trainer.max_prompt_length, num_workers=1)

    def trainer():
        exp = RlkitExp.__new__(RlkitExp)
        exp.rows_in_order = True
        args = dict(tracker=None, tokenizer=tokenizer, train_dataset=ds, eval_dataset=None)
        args |= dict(inference_engine_client=None, generator=None, colocate_pg=None)
        return exp.get_trainer(cfg=cfg, **args)

    def rows(batch):
        return [x["env_extras"]["extra_info"]["index"] for x in batch]

    n = preset.prompts_per_step
    first = trainer()
    assert len(first.train_dataloader) == 4 and first.total_training_steps == 4
    batches = iter(first.train_dataloader)
    assert rows(next(batches)) == list(range(n))  # step 1: the first n rows, in order
    state = first.train_dataloader.state_dict()  # what SkyRL's checkpoint saves (data.pt)
    expected = rows(next(batches))
    assert expected == list(range(n, 2 * n))
    resumed = trainer()
    resumed.train_dataloader.load_state_dict(state)
    assert rows(next(iter(resumed.train_dataloader))) == expected
    shuffled = [rows(b) for b in build_dataloader(cfg, ds, is_train=True)]
    assert sorted(sum(shuffled, [])) == list(range(4 * n)) and shuffled[0] != list(range(n))


def test_the_curriculum_sets_no_skyrl_key(preset):
    plain = replace(preset, recipe=replace(preset.recipe, curriculum_steps=None))
    assert build_overrides(preset, "a") == build_overrides(plain, "a")
    SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "a"))
