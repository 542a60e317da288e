"""Every SkyRL command rlkit prints passes SkyRL's own config parsing and validation: test 2.

The overrides are taken from what `rlkit submit --dry-run` prints (the entrypoint line, split as
the job's shell splits it, then `rlkit.cluster.skyrl.entry.parse_args`), for every cluster preset at 1, 2
and 4 nodes, and for every `ml.g7e` size and the seed's 6-of-8 layout, and given to `SkyRLTrainConfig.from_cli_overrides` (unknown keys and wrong types
fail there) and `validate_cfg` (batch sizes, colocation, the VLM generator's requirements, loss
and estimator registries). All of `validate_cfg` runs on CPU in skyrl 0.4.0.
"""

from __future__ import annotations

import shlex

import pytest
import torch
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg
from transformers import get_scheduler

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.preset_checks import storage_estimate
from rlkit.cluster.skyrl.preset_sections import G7E
from rlkit.cluster.skyrl.presets import LR_SCHEDULES, PRESETS, get_preset
from rlkit.errors import UsageError
from rlkit.recipe import LOCAL_REDUCTIONS
from rlkit.train.presets import preset as train_preset


def dry_run_overrides(capsys, preset: str, nodes: int) -> list[str]:
    assert rlkit_main(["submit", "--preset", preset, "--nodes", str(nodes), "--dry-run"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("command:")]
    argv = shlex.split(line.removeprefix("command:"))
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
    assert (
        cfg.generator.inference_engine.num_engines
        == sky.num_gpus // sky.layout.tensor_parallel_size
    )
    assert cfg.trainer.placement.policy_num_nodes == nodes
    assert cfg.environment.env_class == "rlkit-maze"
    assert cfg.generator.vision_language_generator and not cfg.generator.batched
    # the local trainer's objective: SkyRL's token_mean is rlkit's (tests/skyrl/test_objective.py);
    # the CPU preset weighs episodes alike (sequence_mean, one the local trainer has too)
    local = {train_preset(name).recipe.loss_reduction for name in ("smoke", "local-tiny")}
    want = "sequence_mean" if preset == "skyrl-tiny-cpu" else "token_mean"
    assert local == {"token_mean"} and cfg.trainer.algorithm.loss_reduction == want
    assert want in LOCAL_REDUCTIONS
    # the CPU preset's rate decays over the run (a constant 3e-4 swung its late evals)
    schedule = "cosine" if preset == "skyrl-tiny-cpu" else "constant_with_warmup"
    assert cfg.trainer.policy.optimizer_config.scheduler == schedule


@pytest.mark.parametrize("schedule", LR_SCHEDULES)
def test_every_accepted_lr_schedule_is_one_skyrl_can_build(schedule):
    """SkyRL's FSDP strategy calls transformers' get_scheduler with a warmup and a step count
    only; each schedule rlkit accepts builds from those, and `cosine` ends at 0."""
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    sched = get_scheduler(schedule, opt, num_warmup_steps=0, num_training_steps=40)
    rates = []
    for _ in range(40):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[0] == pytest.approx(3e-4)
    if schedule == "cosine":
        assert rates[20] == pytest.approx(1.5e-4, rel=0.05) and rates[-1] < 1e-6


def test_skyrl_rejects_what_rlkit_must_not_emit():
    """The check is real: a key SkyRL lacks, or a batch that does not split, fails in SkyRL."""
    overrides = build_overrides(get_preset("qwen3vl-8b-6gpu"), "r")
    with pytest.raises(Exception, match="not_a_field"):
        SkyRLTrainConfig.from_cli_overrides([*overrides, "trainer.not_a_field=1"])
    uneven = [o for o in overrides if not o.startswith("trainer.policy_mini_batch_size=")]
    cfg = SkyRLTrainConfig.from_cli_overrides([*uneven, "trainer.policy_mini_batch_size=7"])
    with pytest.raises((AssertionError, ValueError)):
        validate_cfg(cfg)


def dry_run_validates(capsys, argv: list[str]):
    """`rlkit submit ARGV --dry-run`'s SkyRL overrides, parsed and validated by SkyRL."""
    assert rlkit_main(["submit", *argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("command:")]
    _, overrides = parse_args(shlex.split(line.removeprefix("command:"))[3:])
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    return cfg, out


@pytest.mark.parametrize("instance", sorted(G7E))
def test_every_instance_size_dry_run_validates(capsys, instance):
    """Each ml.g7e size: the smoke preset on one node with all its GPUs, and the 8B on the fewest
    nodes whose GPUs hold its training state (refused in one line where none can)."""
    inst = G7E[instance]
    argv = ["--preset", "qwen3vl-2b-smoke", "--instance-type", instance, "--gpus-per-node"]
    cfg, out = dry_run_validates(capsys, [*argv, str(inst.gpus)])
    assert cfg.trainer.placement.policy_num_gpus_per_node == inst.gpus
    assert cfg.generator.inference_engine.num_engines == inst.gpus
    assert f"1 x {instance}, each pod {inst.gpus} GPUs" in out
    # /fsx holds the same sharded checkpoints and exports whatever the layout
    est = storage_estimate(get_preset("qwen3vl-2b-smoke"))
    assert f"storage:       {est.summary()}" in out
    fits = [
        n for n in range(1, 9) if not _refused(model_params_b=8.8, instance_type=instance, nodes=n)
    ]
    if not inst.efa:  # one GPU, and no EFA to span nodes: the 8B cannot run there
        assert fits == []
        return
    nodes = fits[0]
    argv = ["--preset", "qwen3vl-8b", "--instance-type", instance, "--nodes", str(nodes)]
    cfg, out = dry_run_validates(capsys, argv)
    assert cfg.trainer.placement.policy_num_nodes == nodes
    assert cfg.generator.inference_engine.num_engines == nodes * inst.gpus
    assert (f"{inst.efa} EFA" in out) == (nodes > 1)


def _refused(**changes) -> str | None:
    try:
        get_preset("qwen3vl-8b", **changes)
    except UsageError as e:
        return str(e)
    return None


def test_the_seed_layout_is_six_of_eight(capsys):
    cfg, out = dry_run_validates(capsys, ["--preset", "qwen3vl-8b-6gpu"])
    assert cfg.trainer.placement.policy_num_gpus_per_node == 6
    assert "1 x ml.g7e.48xlarge, each pod 6 GPUs, 126 vCPU, 1344 GiB, no EFA" in out
    cfg, _ = dry_run_validates(capsys, ["--preset", "qwen3vl-8b-6gpu", "--nodes", "2"])
    assert cfg.generator.inference_engine.num_engines == 12


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--preset", "qwen3vl-8b-6gpu", "--instance-type", "ml.g7e.24xlarge"], "has 4 GPU(s)"),
        (["--preset", "qwen3vl-8b", "--gpus-per-node", "9"], "has 8 GPU(s), the layout asks 9"),
        (["--preset", "qwen3vl-8b", "--instance-type", "ml.g7e.8xlarge"], "add nodes or GPUs"),
        (["--preset", "qwen3vl-8b", "--instance-type", "ml.g7e.4xlarge"], "training state"),
        (
            ["--preset", "qwen3vl-2b-smoke", "--instance-type", "ml.g7e.2xlarge"]
            + ["--gpus-per-node", "1", "--nodes", "2"],
            "has no EFA",
        ),
        (["--preset", "qwen3vl-8b", "--instance-type", "ml.p5.48xlarge"], "unknown instance"),
    ],
)
def test_a_layout_the_instance_cannot_hold_is_refused_in_one_line(capsys, argv, says):
    assert rlkit_main(["submit", *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
