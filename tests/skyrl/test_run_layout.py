"""A run tree as SkyRL's trainer writes it is read by rlkit's readers: contract test 4.

SkyRL's own `RayPPOTrainer.save_checkpoints` / `save_models` write the tree (checkpoint dirs,
`data.pt`, `trainer_state.pt`, the latest marker without a newline, keep-k pruning by its
`cleanup_old_checkpoints`, HF exports under `export_path/global_step_N/policy`), called on a
small stand-in for the trainer's state: its workers (`dispatch`) save rlkit's tiny model where
the FSDP workers would save the 8B. The config is the cluster preset's own.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import (
    cleanup_old_checkpoints,
    validate_consistency_for_latest_checkpoint,
)

from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.model.load import check_checkpoint
from rlkit.run.checkpoints import MARKER as LATEST_MARKER
from rlkit.run.skyrl_layout import latest_step, list_checkpoints


class Workers:
    """Where SkyRL's FSDP workers would write model shards and HF exports: the tiny model."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir

    def save_checkpoint(self, role: str, path: str, tokenizer) -> None:
        shutil.copytree(self.model_dir, path)

    def save_hf_model(self, role: str, path: str, tokenizer) -> None:
        shutil.copytree(self.model_dir, path)


class Loader:
    def state_dict(self) -> dict:
        return {"samples_yielded": 0}


def trainer_state(cfg: SkyRLTrainConfig, model_dir: Path, tokenizer) -> SimpleNamespace:
    state = SimpleNamespace(
        cfg=cfg,
        global_step=0,
        dispatch=Workers(model_dir),
        train_dataloader=Loader(),
        tokenizer=tokenizer,
        has_critic=False,
        all_timings={},
    )
    # the real cleanup, on this node only (SkyRL also runs it on every node through Ray)
    state._cleanup_old_checkpoints = lambda: cleanup_old_checkpoints(
        cfg.trainer.ckpt_path, cfg.trainer.max_ckpts_to_keep
    )
    return state


def test_skyrl_run_tree_reads_back(tmp_path: Path, tiny_dir: Path, tokenizer):
    preset = get_preset("qwen3vl-8b-6gpu", runs_root=str(tmp_path))
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "run-a"))
    paths = RunPaths.for_run(preset, "run-a")
    assert cfg.trainer.ckpt_path == paths.run_dir  # SkyRL's checkpoints land in rlkit's run dir
    trainer = trainer_state(cfg, tiny_dir, tokenizer)
    steps = range(10, 80, 10)
    for step in steps:
        trainer.global_step = step
        RayPPOTrainer.save_models(trainer)
        RayPPOTrainer.save_checkpoints(trainer)

    run = Path(paths.run_dir)
    assert (run / LATEST_MARKER).read_text() == "70"  # SkyRL writes no trailing newline
    assert latest_step(run) == 70
    validate_consistency_for_latest_checkpoint(
        str(run), 70, str(run / "global_step_70"), str(run / LATEST_MARKER), 10
    )
    ckpts = list_checkpoints(run)
    assert [c.step for c in ckpts] == list(steps), "every export is listed, not only keep-k"
    kept = cfg.trainer.max_ckpts_to_keep
    assert [c.step for c in ckpts if c.path is not None] == list(steps)[-kept:]
    assert [c.step for c in ckpts if c.complete] == list(steps)[-kept:]
    for c in ckpts:
        assert c.hf_export == Path(paths.export_dir) / f"global_step_{c.step}" / "policy"
        check_checkpoint(c.hf_export)  # what `rlkit eval --policy` accepts
    newest = ckpts[-1].path
    assert {p.name for p in newest.iterdir()} == {"policy", "data.pt", "trainer_state.pt"}


def test_a_checkpoint_cut_short_is_not_complete(tmp_path: Path, tiny_dir: Path, tokenizer):
    """A node dies after writing global_step_20/ but before the marker: 10 stays the latest."""
    preset = get_preset("qwen3vl-8b-6gpu", runs_root=str(tmp_path))
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "run-b"))
    trainer = trainer_state(cfg, tiny_dir, tokenizer)
    trainer.global_step = 10
    RayPPOTrainer.save_checkpoints(trainer)
    run = Path(cfg.trainer.ckpt_path)
    shutil.copytree(run / "global_step_10", run / "global_step_20")
    ckpts = list_checkpoints(run)
    assert [(c.step, c.complete, c.hf_export) for c in ckpts] == [
        (10, True, None),
        (20, False, None),
    ]
