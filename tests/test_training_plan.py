"""Notebook 03's plan: one `recipe` dict reaches whichever backend the preset names (local:
`--set recipe.*` on the job's command; SkyRL: its `trainer.algorithm.*` overrides), and a switch
a backend cannot honour is refused before anything is submitted."""

import pytest

from rlkit.cluster import launch
from rlkit.errors import UsageError
from rlkit.notebook import workbench as training


def test_a_recipe_reaches_the_local_trainers_command(tmp_path):
    plan = training.plan_run("smoke", tmp_path, recipe={"eps_clip_high": 0.28})
    assert plan.overrides == ("recipe.eps_clip_high=0.28",)
    assert plan.command.endswith("--set recipe.eps_clip_high=0.28")
    assert plan.recipe == {"eps_clip_high": 0.28}
    assert "recipe:        eps_clip_high=0.28" in str(plan).splitlines()
    plain = training.plan_run("smoke", tmp_path)
    assert plain.overrides == () and "--set" not in plain.command
    assert "recipe:        the preset's own" in str(plain).splitlines()


def test_the_same_recipe_reaches_skyrls_overrides(tmp_path):
    recipe = {"eps_clip_high": 0.28, "loss_reduction": "sequence_mean"}
    plan = training.plan_run("skyrl-tiny-cpu", tmp_path, recipe=recipe)
    assert plan.overrides == () and plan.sky is not None
    assert "trainer.algorithm.eps_clip_high=0.28" in plan.command
    assert "trainer.algorithm.loss_reduction=sequence_mean" in plan.command
    # the CPU preset's own reduction is already sequence_mean: only the clip is a change
    assert "recipe:        eps_clip_high=0.28" in str(plan).splitlines()
    plain = training.plan_run("skyrl-tiny-cpu", tmp_path)
    assert "trainer.algorithm.eps_clip_high=0.2 " in plain.command


def test_a_switch_a_backend_cannot_honour_is_refused_at_plan_time(tmp_path):
    with pytest.raises(UsageError, match="unknown recipe switch 'clip'"):
        training.plan_run("smoke", tmp_path, recipe={"clip": 0.3})
    with pytest.raises(UsageError, match="recipe.tis_ratio_type=token: the local trainer"):
        training.plan_run("smoke", tmp_path, recipe={"tis_ratio_type": "token"})
    with pytest.raises(UsageError, match="launch needs a cluster"):
        launch.launch_plan(
            training.plan_run("smoke", tmp_path, recipe={"eps_clip_high": 0.3}), None
        )


def test_submit_plans_a_local_preset_on_the_path_a_skyrl_one_takes(capsys, tmp_path):
    from rlkit.cli.main import main

    argv = ["submit", "--preset", "smoke", "--runs-root", str(tmp_path), "--run-name", "s"]
    assert main([*argv, "--set", "grpo.lr=1e-4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "preset:        smoke (local backend)" in out and "--set grpo.lr=1e-4" in out
    assert f"run dir:       {(tmp_path / 's').resolve()}" in out
    assert main([*argv, "--set", "grpo.group_size=1", "--dry-run"]) == 2  # the local config's
    assert "group_size (1) must be >= 2" in capsys.readouterr().err
    assert main([*argv, "--nodes", "2", "--dry-run"]) == 2
    assert "--nodes applies to SkyRL presets" in capsys.readouterr().err
