"""A job killed between a step's checkpoint and its HF export: the resumed run writes the export.

SkyRL 0.4.0's own `RayPPOTrainer` code runs here, built by `RlkitExp.get_trainer` from the
preset's config: `__init__` (the train dataloader and step count), `save_checkpoints`,
`load_checkpoints` and `save_models`. Only the FSDP workers behind `dispatch` are stand-ins: they
save rlkit's tiny model where the workers would save the 8B, and record what they load. Keep-k
pruning runs on this node only (SkyRL also fans it out to every node through Ray), and the
config leaves out the Ray metrics scraper and GPU monitor, which need a running Ray, and the
dataloader's worker processes.
"""

from __future__ import annotations

import copy
import logging
import shutil
from pathlib import Path

import pytest
from skyrl.train import trainer as skyrl_trainer
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import cleanup_old_checkpoints

from rlkit.cluster.skyrl import experiment as trainer_module
from rlkit.cluster.skyrl.entry import ensure_datasets
from rlkit.cluster.skyrl.experiment import RlkitExp, RlkitTrainer, export_due
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.model.load import check_checkpoint
from rlkit.run.skyrl_layout import list_checkpoints


class Workers:
    """Where SkyRL's FSDP workers would load and save: the tiny model's files; `nodes`: the Ray
    node of each worker."""

    def __init__(self, model_dir: Path, nodes: tuple[str, ...] = ()) -> None:
        self.model_dir = model_dir
        self.nodes = nodes
        self.loaded: list[str] = []
        self.exported: list[str] = []

    def get_node_ids(self) -> list[str]:
        return list(self.nodes)

    def save_checkpoint(self, role: str, path: str, tokenizer) -> None:
        shutil.copytree(self.model_dir, path)

    def load_checkpoint(self, role: str, path: str, **_states: bool) -> None:
        self.loaded.append(path)

    def save_hf_model(self, role: str, path: str, tokenizer) -> None:
        self.exported.append(path)
        shutil.copytree(self.model_dir, path)


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer) -> tuple[SkyRLTrainConfig, PromptDataset]:
    """The smoke preset over 6 steps of one epoch, a checkpoint and an export every 2."""
    preset = get_preset(
        "qwen3vl-2b-smoke", runs_root=str(tmp_path_factory.mktemp("runs")), steps=6, ckpt_interval=2
    )
    paths = RunPaths.for_run(preset, "gap")
    ensure_datasets(paths.data_dir, preset.train_rows, preset.task.eval_set, preset.eval.eval_mazes)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "gap"))
    # what would need a running Ray: its metrics scraper and GPU monitor (read at __init__)
    cfg.generator.inference_engine.enable_ray_prometheus_stats = False
    cfg.trainer.enable_ray_gpu_monitor = False
    # SkyRL's 8 dataloader worker processes: `save_checkpoints` reads the loader's state_dict,
    # which spawns them (~2 minutes a test on 2 cores); without them the state is the sampler's
    cfg.data.dataloader.num_workers = 0
    ds = PromptDataset(cfg.data.train_data, tokenizer, cfg.trainer.max_prompt_length, num_workers=1)
    return cfg, ds


@pytest.fixture
def cfg(run, tmp_path) -> SkyRLTrainConfig:
    """The run's config, this test's own: checkpoints in tmp_path, exports in tmp_path/exports."""
    cfg = copy.deepcopy(run[0])
    cfg.trainer.ckpt_path, cfg.trainer.export_path = str(tmp_path), str(tmp_path / "exports")
    return cfg


@pytest.fixture(autouse=True)
def _root_logging(monkeypatch):
    """RayPPOTrainer.__init__ routes stdlib logging through loguru for Ray workers; not for the
    rest of this test session."""
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)


def attempt(cfg, ds, tokenizer, tiny_dir, trainer_cls=None, nodes=()) -> RayPPOTrainer:
    """One submission of the job: the trainer `RlkitExp` builds (or `trainer_cls`). `nodes`:
    its workers' Ray nodes, its own pruning kept (else pruning runs on this node only)."""
    args = dict(tracker=None, tokenizer=tokenizer, train_dataset=ds, eval_dataset=None)
    args |= dict(inference_engine_client=None, generator=None, colocate_pg=None)
    if trainer_cls is None:
        # BasePPOExp.__init__ builds datasets and a placement group; get_trainer reads its args
        trainer = RlkitExp.__new__(RlkitExp).get_trainer(cfg=cfg, **args)
    else:
        trainer = trainer_cls(cfg=cfg, **args)
    trainer.dispatch = Workers(tiny_dir, nodes)
    if not nodes:
        trainer._cleanup_old_checkpoints = lambda: cleanup_old_checkpoints(
            cfg.trainer.ckpt_path, cfg.trainer.max_ckpts_to_keep
        )
    return trainer


def killed_before_export(trainer: RayPPOTrainer, steps: list[int]) -> None:
    """SkyRL's step-end saves (checkpoint, then export) at `steps`, the job killed between the
    last step's two."""
    for step in steps:
        trainer.global_step = step
        trainer.save_checkpoints()
        if step != steps[-1]:
            trainer.save_models()


def exported_steps(cfg) -> list[int]:
    return [c.step for c in list_checkpoints(cfg.trainer.ckpt_path, cfg.trainer.export_path)
            if c.hf_export is not None]  # fmt: skip


def test_resumed_run_writes_the_export_a_kill_left_out(tmp_path, cfg, run, tokenizer, tiny_dir):
    ds = run[1]
    first = attempt(cfg, ds, tokenizer, tiny_dir)
    assert type(first) is RlkitTrainer and len(first.train_dataloader) == 6
    killed_before_export(first, [2, 4])
    assert exported_steps(cfg) == [2]

    skyrl = attempt(cfg, ds, tokenizer, tiny_dir, RayPPOTrainer)
    assert skyrl.load_checkpoints()[0] == 4
    assert skyrl.dispatch.exported == [] and exported_steps(cfg) == [2], "SkyRL's own gap"

    resumed = attempt(cfg, ds, tokenizer, tiny_dir)
    step, path = resumed.load_checkpoints()
    assert (step, path) == (4, str(tmp_path / "global_step_4"))
    assert resumed.dispatch.loaded == [str(tmp_path / "global_step_4" / "policy")]
    export = tmp_path / "exports" / "global_step_4" / "policy"
    assert resumed.dispatch.exported == [str(export)]
    assert exported_steps(cfg) == [2, 4]
    check_checkpoint(export)  # what `rlkit eval --policy` accepts

    again = attempt(cfg, ds, tokenizer, tiny_dir)
    assert again.load_checkpoints()[0] == 4 and again.dispatch.exported == []


def test_no_export_where_skyrl_makes_none(cfg, run, tokenizer, tiny_dir):
    """A checkpoint off the export interval gets none on resume; a fresh run loads nothing."""
    ds = run[1]
    cfg.trainer.hf_save_interval = 4
    fresh = attempt(cfg, ds, tokenizer, tiny_dir)
    assert fresh.load_checkpoints() == (0, None) and fresh.dispatch.exported == []
    killed_before_export(fresh, [2])
    resumed = attempt(cfg, ds, tokenizer, tiny_dir)
    assert resumed.load_checkpoints()[0] == 2
    assert resumed.dispatch.exported == [] and exported_steps(cfg) == []


def test_export_due_as_skyrls_train_loop():
    # interval 4, 6 steps an epoch, 12 steps: 4 8 12 (interval), 6 12 (epoch ends), 12 (last)
    assert [s for s in range(14) if export_due(s, 4, 6, 12)] == [4, 6, 8, 12]
    assert [s for s in range(9) if export_due(s, 0, 6, 8)] == []  # exports off
    assert [s for s in range(9) if export_due(s, 5, 100, 7)] == [5, 7]  # max_training_steps 7


@pytest.mark.parametrize(
    ("nodes", "fanned_out"), [(("here", "here"), False), (("here", "there"), True)]
)
def test_old_checkpoints_are_pruned_once_when_every_worker_is_on_the_trainers_node(
    cfg, run, tokenizer, tiny_dir, monkeypatch, nodes, fanned_out
):
    """Keep-k pruning at each save: on one node, the trainer's own call alone (SkyRL's per-node
    Ray task would repeat it); across nodes, SkyRL's fan-out as well."""
    tasks = []
    monkeypatch.setattr(trainer_module, "driver_node", lambda: "here")
    monkeypatch.setattr(skyrl_trainer, "run_on_each_node", lambda ids, *a: tasks.append(set(ids)))
    cfg.trainer.max_ckpts_to_keep = 1
    trainer = attempt(cfg, run[1], tokenizer, tiny_dir, nodes=nodes)
    for step in (2, 4):
        trainer.global_step = step
        trainer.save_checkpoints()
    assert [c.step for c in list_checkpoints(cfg.trainer.ckpt_path, cfg.trainer.export_path)] == [4]
    assert tasks == ([set(nodes)] * 2 if fanned_out else [])
