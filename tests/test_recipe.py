"""The recipe vocabulary (rlkit.recipe) and the run's own config read back (run.json).

Per-switch equality with SkyRL's config and math: tests/skyrl/test_recipe_switches.py.
"""

import json
import subprocess
import sys

import pytest

from rlkit.errors import UsageError
from rlkit.recipe import Recipe, local_set_args
from rlkit.settings import apply_settings, resolve_key
from rlkit.train.config import LOCAL_TINY_RECIPE, GRPOConfig, apply_recipe
from rlkit.train.presets import preset
from rlkit.train.run_config import (
    check_resume,
    config_from_dict,
    resume_config,
    upgrade_config_dict,
)


def test_recipe_module_imports_no_torch():
    code = "import sys, rlkit.recipe; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_changes_and_coercion_from_strings():
    r = Recipe().with_changes(
        {"recipe.eps_clip_high": "0.28", "grpo_norm_by_std": "false", "tis_ratio_type": "none"}
    )
    assert (r.eps_clip_high, r.grpo_norm_by_std, r.tis_ratio_type) == (0.28, False, None)
    assert r.changes() == {"eps_clip_high": 0.28, "grpo_norm_by_std": False}
    assert Recipe().with_changes({"max_seq_len": "12"}).max_seq_len == 12
    assert local_set_args({"eps_clip_high": 0.28, "max_seq_len": None}) == [
        "recipe.eps_clip_high=0.28",
        "recipe.max_seq_len=null",
    ]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"kl_coef": "0.1"}, "unknown recipe switch 'kl_coef'"),
        ({"loss_reduction": "mean"}, "recipe.loss_reduction 'mean' must be token_mean"),
        ({"policy_loss_type": "ppo"}, "recipe.policy_loss_type 'ppo' must be regular"),
        ({"eps_clip_low": "1.5"}, "eps_clip_low (1.5) must be in [0, 1)"),
        ({"kl_loss_coef": "-1"}, "kl_loss_coef (-1.0) must be >= 0"),
        ({"grpo_norm_by_std": "maybe"}, "takes true or false"),
        ({"eps_clip_high": "wide"}, "takes a float"),
        ({"loss_reduction": "seq_mean_token_sum_norm"}, "needs recipe.max_seq_len"),
        ({"fail_advantage": "0.5"}, "fail_advantage (0.5) must be < 0"),
    ],
)
def test_bad_switches_are_one_line_errors(changes, says):
    with pytest.raises(UsageError) as e:
        Recipe().with_changes(changes)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_refusals_name_the_switch_and_the_backend():
    r = Recipe(tis_ratio_type="token", kl_placement="reward", fail_advantage=-1.0)
    assert (
        Recipe(zero_variance_filter=True)
        .refusals("skyrl")[0]
        .startswith("recipe.zero_variance_filter=true: SkyRL")
    )
    local, skyrl = r.refusals("local"), r.refusals("skyrl")
    assert [x.split(":")[0] for x in local] == [
        "recipe.kl_placement=reward",
        "recipe.tis_ratio_type=token",
    ]
    assert all("local trainer" in x and "\n" not in x for x in local)
    assert skyrl == [
        "recipe.fail_advantage=-1.0: SkyRL has no advantage for groups that all failed (they "
        "get 0); set it to none for a SkyRL preset"
    ]
    with pytest.raises(UsageError, match="fail_advantage"):
        r.skyrl_overrides()
    assert Recipe().refusals("local") == Recipe().refusals("skyrl") == []


def test_local_presets_embed_the_recipe_and_set_it_with_recipe_keys():
    assert preset("local-tiny").recipe == LOCAL_TINY_RECIPE
    smoke = preset("smoke")
    assert (smoke.recipe.kl_loss_coef, smoke.recipe.fail_advantage) == (0.0, None)
    cfg = smoke.with_overrides(
        {"recipe.max_seq_len": "12", "recipe.loss_reduction": "seq_mean_token_sum_norm"}
    )  # order-free: the reduction needs the budget, checked once every switch is in
    assert (cfg.recipe.loss_reduction, cfg.recipe.max_seq_len) == ("seq_mean_token_sum_norm", 12)
    with pytest.raises(UsageError, match="is now 'recipe.kl_loss_coef'"):
        smoke.with_overrides({"grpo.kl_coef": "0.1"})
    with pytest.raises(UsageError, match="is a section"):
        smoke.with_overrides({"recipe": "x"})
    gspo = apply_recipe(smoke, {"policy_loss_type": "gspo", "recipe.eps_clip_high": "0.28"})
    assert gspo.recipe.changes(smoke.recipe) == {"policy_loss_type": "gspo", "eps_clip_high": 0.28}
    assert apply_recipe(smoke, gspo.recipe) == gspo
    with pytest.raises(UsageError, match="tis_ratio_type=token: the local trainer"):
        apply_recipe(smoke, {"tis_ratio_type": "token"})


@pytest.mark.parametrize("name", ["smoke", "local-tiny"])
def test_run_json_config_loads_back_equal(tmp_path, name):
    from rlkit.run.rundir import RunDir

    cfg = preset(name).with_overrides({"recipe.eps_clip_high": "0.28", "grpo.lr": "1e-4"})
    run = RunDir(tmp_path)
    run.init(preset=name, seed=0, backend="local", config=cfg.to_dict())
    assert config_from_dict(run.read_info()["config"]) == cfg


def test_run_json_config_with_an_unknown_or_invalid_key_is_one_line():
    good = preset("smoke").to_dict()
    bad_key = json.loads(json.dumps(good))
    bad_key["grpo"]["learning_rate"] = 1.0
    with pytest.raises(UsageError, match=r"run.json: unknown config key 'grpo.learning_rate'"):
        config_from_dict(bad_key)
    bad_value = json.loads(json.dumps(good))
    bad_value["recipe"]["loss_reduction"] = "mean"
    with pytest.raises(UsageError) as e:
        config_from_dict(bad_value, where="runs/x/run.json")
    assert str(e.value).startswith("runs/x/run.json: recipe.loss_reduction 'mean'")
    not_a_section = json.loads(json.dumps(good))
    not_a_section["grpo"] = 3
    with pytest.raises(UsageError, match="'grpo' must be a section"):
        config_from_dict(not_a_section)
    older = json.loads(json.dumps(good))
    del older["grpo"]["turn_slack"]  # a run.json older than a field: its default
    assert config_from_dict(older).grpo.turn_slack == GRPOConfig().turn_slack


def test_a_run_json_from_before_the_recipe_reads_through_the_renames():
    old = preset("local-tiny").to_dict()
    old.pop("recipe")
    old["grpo"] |= {
        "eps_clip_low": 0.2,
        "eps_clip_high": 0.28,
        "norm_by_std": False,
        "reduction": "token_mean",
        "max_seq_len": None,
        "kl_coef": 0.05,
        "kl_estimator": "k3",
        "min_informative": old["grpo"]["mazes_per_step"],  # the one meaning the filter keeps
        "max_rounds": 4,
        "fail_advantage": -1.0,
        "filter_zero_variance": True,
    }
    cfg = config_from_dict(old)
    r = cfg.recipe
    assert (r.eps_clip_high, r.grpo_norm_by_std, r.kl_loss_coef) == (0.28, False, 0.05)
    assert (r.dynamic_sampling_type, r.max_sample_batches) == ("filter", 4)
    current = json.loads(json.dumps(cfg.to_dict()))  # run.json's form
    assert upgrade_config_dict(current) == current  # already current: unchanged
    changed = cfg.with_overrides({"recipe.eps_clip_high": "0.2"})
    with pytest.raises(UsageError, match=r"recipe\.eps_clip_high 0\.28 -> 0\.2"):
        check_resume(old, changed, "runs/old")  # compared through the renames
    fewer = json.loads(json.dumps(old))
    fewer["grpo"]["min_informative"] = 32  # train on all groups drawn until 32 teach: gone
    with pytest.raises(
        UsageError, match="runs/old/run.json: grpo.min_informative=32 .* start a new"
    ):
        config_from_dict(fewer, "runs/old/run.json")


def test_resume_uses_the_recorded_config_plus_explicit_changes():
    recorded = preset("smoke").with_overrides({"recipe.eps_clip_high": "0.28", "grpo.lr": "1e-4"})
    saved = recorded.to_dict()
    bare = preset("smoke")  # `rlkit train --preset smoke` again, without the first run's --set
    assert resume_config(saved, bare) == recorded
    longer = preset("smoke").with_overrides({"schedule.steps": "9"})
    got = resume_config(saved, longer)  # what the caller changed from its preset applies
    assert got.schedule.steps == 9 and got.recipe.eps_clip_high == 0.28
    explicit = resume_config(saved, bare, {"schedule.steps": "7"})
    assert explicit.schedule.steps == 7 and explicit.grpo.lr == 1e-4
    assert check_resume(saved, explicit, "r") == {"schedule.steps": (4, 7)}
    clash = resume_config(saved, bare, {"recipe.eps_clip_high": "0.2"})
    with pytest.raises(UsageError, match="another recipe"):
        check_resume(saved, clash, "r")
    assert resume_config(None, bare) is bare
    assert resume_config(saved, recorded) is recorded  # the same config: kept as it is


def test_skyrl_preset_settings_take_recipe_switches_by_name():
    from rlkit.cluster.skyrl.presets import get_preset

    base = get_preset("qwen3vl-8b")  # `rlkit submit --set` and a notebook's `skyrl` changes
    got = {"recipe.eps_clip_high": "0.28", "nodes": "2"}
    assert {resolve_key(base, k) for k in got} == {"recipe.eps_clip_high", "layout.nodes"}
    p = get_preset("qwen3vl-8b", **got)
    assert (p.recipe.eps_clip_high, p.layout.nodes) == (0.28, 2)  # coerced to the field's type
    assert (type(p.recipe.eps_clip_high), type(p.layout.nodes)) == (float, int)
    assert p.recipe.kl_loss_coef == 0.005
    assert get_preset("qwen3vl-8b", recipe={"eps_clip_high": 0.28}).recipe == p.recipe
    with pytest.raises(UsageError, match=r"did you mean recipe.kl_loss_coef\?"):
        apply_settings(base, {"kl_los_coef": "0.1"})
    with pytest.raises(UsageError, match="is now the recipe switch 'kl_loss_coef'"):
        get_preset("qwen3vl-8b", kl_coef=0.1)
