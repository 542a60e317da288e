"""SkyRL's known traps are refused in one line, before anything reaches a cluster: at the dry run,
at a real submit (no head is reached: the address is a closed port), when writing a RayJob, and
in the preset itself (so notebooks and `plan_training` refuse too). The preflight refusal is in
tests/test_preflight.py. Why each is a trap: docs/skyrl-integration.md (presets and their overrides). With TIS on,
temperature and top-p other than 1 pass, and SkyRL's own validation accepts the command."""

from __future__ import annotations

import pytest
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.launch import plan_training
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.errors import UsageError

TRAPS = [
    (["--set", "epochs=2"], "epochs (2) must be 1: SkyRL's resume"),
    (["--model", "Qwen/Qwen3-VL-8B-Thinking"], "is a thinking model"),
    (["--model", "/fsx/models/Qwen3-VL-30B-A3B-Thinking/"], "is a thinking model"),
    (["--set", "temperature=0.7"], "temperature (0.7) must be 1.0 unless TIS is on"),
    (["--set", "top_p=0.95"], "set tis_ratio_type=token"),
    (["--set", "tis_ratio_type=tokens"], "must be token, sequence or none"),
    (["--set", "lr_schedule=cosine_with_min_lr"], "lr_schedule 'cosine_with_min_lr' must be"),
    (["--set", "mm_cache_gb=-1"], "mm_cache_gb (-1.0) must be >= 0 (0: no cache)"),
]
MODES = [["--dry-run"], ["--address", "http://127.0.0.1:9"], ["--rayjob", "never.yaml"]]


@pytest.mark.parametrize("mode", MODES, ids=["dry-run", "submit", "rayjob"])
@pytest.mark.parametrize(("change", "says"), TRAPS)
def test_submit_refuses_in_one_line(capsys, tmp_path, monkeypatch, mode, change, says):
    monkeypatch.chdir(tmp_path)
    assert rlkit_main(["submit", "--preset", "qwen3vl-8b", *change, *mode]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never.yaml").exists()


def test_the_preset_refuses_wherever_it_is_built():
    with pytest.raises(UsageError, match="thinking model"):
        get_preset("qwen3vl-8b-6gpu", model_path="Qwen/Qwen3-VL-8B-Thinking")
    with pytest.raises(UsageError, match="epochs"):
        plan_training("qwen3vl-2b-smoke", ".", skyrl_changes={"epochs": "3"})
    # what stays allowed: Instruct models, T = top-p = 1, and eval sampling at any temperature
    ok = get_preset("qwen3vl-8b", model_path="/fsx/models/Qwen3-VL-8B-Instruct")
    assert (ok.batch.temperature, ok.batch.top_p, ok.batch.epochs) == (1.0, 1.0, 1)
    assert get_preset("qwen3vl-8b", eval_temperature=0.6).eval.eval_temperature == 0.6


@pytest.mark.parametrize("tis", ["token", "sequence"])
def test_with_tis_on_other_sampling_is_allowed_and_validates(tis):
    preset = get_preset("qwen3vl-8b", temperature=0.8, top_p=0.95, tis_ratio_type=tis)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "r"))
    validate_cfg(cfg)
    assert cfg.trainer.algorithm.off_policy_correction.tis_ratio_type == tis
    assert cfg.generator.sampling_params.logprobs == 1  # the rollout logprobs TIS divides by
    assert (cfg.generator.sampling_params.temperature, cfg.generator.sampling_params.top_p) == (
        0.8,
        0.95,
    )
    off = SkyRLTrainConfig.from_cli_overrides(build_overrides(get_preset("qwen3vl-8b"), "r"))
    assert off.trainer.algorithm.off_policy_correction.tis_ratio_type is None
