"""LoRA and a frozen vision side on SkyRL presets: the same `Tuning` fields as the local trainer,
mapped to SkyRL's own `trainer.policy.model.lora.*` and validated by SkyRL's config classes; the
adapters SkyRL's values give under peft (as its FSDP worker builds them) are the ones the local
trainer attaches; the dry run's `lora:` line and adapter-sized /fsx estimate; and what SkyRL
0.4.0 cannot do refused in one line, the CPU refusal's reason shown by SkyRL's own validate_cfg."""

from __future__ import annotations

import pytest
from peft import LoraConfig, TaskType, get_peft_model
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl import cpu_seam
from rlkit.cluster.skyrl.overrides import build_overrides, model_overrides
from rlkit.cluster.skyrl.preset_checks import storage_estimate
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.errors import UsageError
from rlkit.model.build import build_tiny
from rlkit.model.config import Tuning
from rlkit.model.load import load, tune

TUNINGS = [
    {"lora_rank": 32},
    {"lora_rank": 16, "lora_alpha": 32, "freeze_vision": "tower"},
    {"lora_rank": 8, "lora_targets": "q_proj,v_proj,linear_fc1", "freeze_vision": "tower+merger"},
]


def skyrl_cfg(**tuning) -> SkyRLTrainConfig:
    cfg = SkyRLTrainConfig.from_cli_overrides(
        build_overrides(get_preset("qwen3vl-8b", **tuning), "r")
    )
    validate_cfg(cfg)  # SkyRL's own checks, LoRA's included
    return cfg


@pytest.mark.parametrize("tuning", TUNINGS, ids=lambda t: "-".join(map(str, t.values())))
def test_lora_overrides_are_skyrls_own_settings(tuning):
    lora = skyrl_cfg(**tuning).trainer.policy.model.lora
    t = Tuning(**tuning)
    assert (lora.rank, lora.alpha) == (t.lora_rank, t.lora_alpha)
    assert lora.target_modules == t.target_modules
    assert lora.exclude_modules == t.frozen_pattern


@pytest.mark.parametrize("tuning", TUNINGS, ids=lambda t: "-".join(map(str, t.values())))
def test_skyrls_values_adapt_the_modules_the_local_trainer_adapts(tuning, tmp_path):
    """SkyRL's FSDP worker builds peft's LoraConfig from its lora settings
    (`model_wrapper.py`: task_type, r, lora_alpha, target_modules, exclude_modules, bias)."""
    lora = skyrl_cfg(**tuning).trainer.policy.model.lora
    path = build_tiny(tmp_path / "m", seed=0)
    theirs = get_peft_model(
        load(path).model,
        LoraConfig(
            task_type=TaskType.CAUSAL_LM,
            r=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=lora.target_modules,
            exclude_modules=lora.exclude_modules,
            lora_dropout=lora.dropout,
            bias="none",
        ),
    )
    ours = load(path).model
    tune(ours, Tuning(**tuning))

    def adapted(model) -> set[str]:
        names = (n for n, p in model.named_parameters() if p.requires_grad)
        return {n.removeprefix("base_model.model.") for n in names}

    assert adapted(ours) and adapted(ours) == adapted(theirs)


def test_lora_off_adds_no_key():
    assert model_overrides(get_preset("qwen3vl-8b")) == []
    assert skyrl_cfg().trainer.policy.model.lora.rank == 0


def test_adapters_on_the_vision_side_reach_vllm():
    on = skyrl_cfg(lora_rank=8).generator.inference_engine.engine_init_kwargs
    off = skyrl_cfg(lora_rank=8, freeze_vision="tower+merger").generator.inference_engine
    assert on["enable_tower_connector_lora"] is True
    assert "enable_tower_connector_lora" not in off.engine_init_kwargs


def test_the_dry_run_prints_the_lora_line_and_an_adapter_sized_fsx_estimate(capsys):
    sets = ["--set", "lora_rank=32", "--set", "freeze_vision=tower"]
    assert rlkit_main(["submit", "--preset", "qwen3vl-8b", "--dry-run", *sets]) == 0
    out = capsys.readouterr().out
    assert "lora:          rank 32, alpha 16, targets all-linear, vision tower frozen" in out
    assert "LoRA adapter exports x 0.42 GB" in out
    full = storage_estimate(get_preset("qwen3vl-8b"))
    lora = storage_estimate(get_preset("qwen3vl-8b", lora_rank=32))
    assert lora.export_gb < full.export_gb / 40 and lora.total_gb < full.total_gb / 4


@pytest.mark.parametrize(
    ("preset", "changes", "says"),
    [
        ("qwen3vl-8b", {"freeze_vision": "tower"}, "SkyRL 0.4.0's FSDP trainer has no switch"),
        ("skyrl-tiny-cpu", {"lora_rank": 8}, "SkyRL 0.4.0's CPU path syncs weights with"),
        ("qwen3vl-8b", {"lora_rank": -2}, "lora_rank (-2) must be >= 0"),
        ("qwen3vl-8b", {"lora_targets": "lm_head"}, "lm_head is not a Qwen3-VL linear layer"),
    ],
)
def test_what_skyrl_cannot_do_is_refused_in_one_line(preset, changes, says):
    with pytest.raises(UsageError) as e:
        get_preset(preset, **changes)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_skyrls_own_validation_refuses_lora_on_the_cpu_path():
    """The CPU refusal's reason, from SkyRL itself: the CPU preset's overrides with its seam's
    (delta weight sync) and LoRA on fail SkyRL's validate_cfg."""
    p = get_preset("skyrl-tiny-cpu")
    argv = [*build_overrides(p, "r"), *cpu_seam.overrides("/tmp/r", "a")]
    validate_cfg(SkyRLTrainConfig.from_cli_overrides(argv))  # as the CPU preset runs
    cfg = SkyRLTrainConfig.from_cli_overrides([*argv, "trainer.policy.model.lora.rank=8"])
    with pytest.raises(AssertionError, match="Delta weight sync is not yet supported for LoRA"):
        validate_cfg(cfg)
