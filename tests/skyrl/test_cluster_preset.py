"""The cluster presets' fixes, shown through SkyRL's and vLLM's own code.

- evals sample (SkyRL's default eval sampling is greedy: k samples would be k copies);
- the engine settings reach vLLM as vLLM's own engine arguments, through SkyRL's
  `build_vllm_cli_args` and vLLM's `AsyncEngineArgs.from_cli_args` (vLLM 0.32 here; the
  cluster pins 0.30, which has the same three arguments);
- no per-epoch save flood: SkyRL saves at every epoch end, and one epoch is the whole run;
- the /fsx estimate refuses a run over its budget before anything is submitted.
"""

from __future__ import annotations

import dataclasses

import pytest
from skyrl.backends.skyrl_train.inference_servers.utils import build_vllm_cli_args
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.utils.trainer_utils import build_dataloader
from vllm import AsyncEngineArgs

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.entry import ensure_datasets
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.preset_checks import generate_length, storage_estimate
from rlkit.cluster.skyrl.presets import PRESETS, get_preset
from rlkit.settings import apply_settings


def config(preset, name: str = "r") -> SkyRLTrainConfig:
    return SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, name))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_evals_follow_the_preset_protocol(name):
    """The seed's protocol is greedy; a sampled eval samples like `rlkit eval` (T = 1)."""
    preset = get_preset(name)
    params = config(preset).generator.eval_sampling_params
    sampled = preset.eval.eval_protocol == "sampled"
    assert params.temperature == (preset.eval.eval_temperature if sampled else 0.0)
    assert preset.eval.eval_temperature == 1.0
    assert params.max_generate_length == generate_length(preset)  # None: derived


def test_engine_settings_are_vllm_engine_arguments(tiny_dir):
    # unset first: in one process a backend once set persists into later parses of vLLM's
    # defaults (seen here), so the unset case goes first
    default = AsyncEngineArgs.from_cli_args(
        build_vllm_cli_args(config(get_preset("qwen3vl-8b-6gpu")))
    )
    assert default.attention_backend is None  # unset: vLLM picks its own
    preset = get_preset("qwen3vl-8b-6gpu", attention_backend="TRITON_ATTN")
    cfg = config(apply_settings(preset, {"model_path": str(tiny_dir)}))
    kwargs = dict(cfg.generator.inference_engine.engine_init_kwargs)
    assert set(kwargs) <= {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    engine = AsyncEngineArgs.from_cli_args(build_vllm_cli_args(cfg))
    # the env adds one image per turn: vLLM answers HTTP 400 past this limit
    assert engine.limit_mm_per_prompt == {"image": preset.task.max_turns + 1}
    assert engine.mm_device_do_normalize is False  # normalised pixels reach the trainer
    assert str(engine.attention_backend) == "TRITON_ATTN"  # not an env var vLLM ignores
    assert engine.max_model_len == preset.task.max_model_len


def test_one_epoch_is_the_whole_run(tmp_path, tokenizer):
    """SkyRL saves a checkpoint and an export whenever global_step % len(dataloader) == 0."""
    preset = get_preset("qwen3vl-2b-smoke", runs_root=str(tmp_path))
    cfg = config(preset)
    paths = RunPaths.for_run(preset, "r")
    ensure_datasets(paths.data_dir, preset.train_rows, preset.task.eval_set, preset.eval.eval_mazes)
    train = PromptDataset(cfg.data.train_data, tokenizer, 4096, num_workers=1)
    evals = PromptDataset(cfg.data.val_data, tokenizer, 4096, num_workers=1)
    assert len(build_dataloader(cfg, train, is_train=True)) == preset.batch.steps == 3
    assert len(evals) == preset.eval.eval_mazes == 8
    for name in PRESETS:  # the big one without writing its 5040 rows
        p = get_preset(name)
        assert p.train_rows // config(p).trainer.train_batch_size == p.batch.steps
        assert config(p).trainer.epochs == 1


def test_storage_estimate_and_budget(capsys):
    est = storage_estimate(get_preset("qwen3vl-8b-6gpu"))
    assert est.exports == 14 and est.checkpoints_kept == 3  # steps 10..140, keep 3
    assert (
        17 < est.export_gb < 18
        and est.total_gb < get_preset("qwen3vl-8b-6gpu").storage.fsx_budget_gb
    )
    argv = ["submit", "--preset", "qwen3vl-8b-6gpu", "--dry-run"]
    assert rlkit_main(argv) == 0
    assert f"storage:       {est.summary()}" in capsys.readouterr().out
    assert rlkit_main([*argv, "--fsx-budget-gb", "100"]) == 2
    err = capsys.readouterr().err
    assert "over its 100 GB budget" in err and len(err.strip().splitlines()) == 1
