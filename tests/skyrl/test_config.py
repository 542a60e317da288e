"""Every SkyRL command rlkit prints passes SkyRL's own config parsing and validation: test 2.

The overrides are taken from what `rlkit submit --dry-run` prints (the entrypoint line, split as
the job's shell splits it, then `rlkit.cluster.skyrl.entry.parse_args`), for every cluster preset at 1, 2
and 4 nodes, and given to `SkyRLTrainConfig.from_cli_overrides` (unknown keys and wrong types
fail there) and `validate_cfg` (batch sizes, colocation, the VLM generator's requirements, loss
and estimator registries). All of `validate_cfg` runs on CPU in skyrl 0.4.0.
"""

from __future__ import annotations

import shlex

import pytest
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.presets import PRESETS, build_overrides, get_preset
from rlkit.train.config import preset as train_preset


def dry_run_overrides(capsys, preset: str, nodes: int) -> list[str]:
    assert rlkit_main(["submit", "--preset", preset, "--nodes", str(nodes), "--dry-run"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("entrypoint:")]
    argv = shlex.split(line.removeprefix("entrypoint:"))
    assert argv[:3] == ["python", "-m", "rlkit.cluster.skyrl.entry"]
    _, overrides = parse_args(argv[3:])
    return overrides


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_dry_run_command_passes_skyrl_validation(capsys, preset, nodes):
    overrides = dry_run_overrides(capsys, preset, nodes)
    assert overrides == build_overrides(get_preset(preset, nodes=nodes), preset)
    keys = [o.partition("=")[0] for o in overrides]
    assert len(keys) == len(set(keys)), "an override key is given twice"
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)  # raises with SkyRL's own message on any inconsistency
    sky = get_preset(preset, nodes=nodes)
    assert cfg.generator.inference_engine.num_engines == sky.num_gpus // sky.tensor_parallel_size
    assert cfg.trainer.placement.policy_num_nodes == nodes
    assert cfg.environment.env_class == "rlkit-maze"
    assert cfg.generator.vision_language_generator and not cfg.generator.batched
    # the local trainer's objective: SkyRL's token_mean is rlkit's (tests/skyrl/test_objective.py)
    local = {train_preset(name).grpo.reduction for name in ("smoke", "local-tiny")}
    assert {cfg.trainer.algorithm.loss_reduction} == local == {"token_mean"}


def test_skyrl_rejects_what_rlkit_must_not_emit():
    """The check is real: a key SkyRL lacks, or a batch that does not split, fails in SkyRL."""
    overrides = build_overrides(get_preset("qwen3vl-8b-6gpu"), "r")
    with pytest.raises(Exception, match="not_a_field"):
        SkyRLTrainConfig.from_cli_overrides([*overrides, "trainer.not_a_field=1"])
    uneven = [o for o in overrides if not o.startswith("trainer.policy_mini_batch_size=")]
    cfg = SkyRLTrainConfig.from_cli_overrides([*uneven, "trainer.policy_mini_batch_size=7"])
    with pytest.raises((AssertionError, ValueError)):
        validate_cfg(cfg)
