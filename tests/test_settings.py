"""rlkit.settings.apply_settings: the one override path of every config (the local TrainConfig,
SkyRL presets, a Recipe): its key rules, coercion, and checks run once on the result."""

from __future__ import annotations

import pytest

from rlkit.cluster.skyrl.presets import get_preset
from rlkit.errors import UsageError
from rlkit.recipe import Recipe
from rlkit.settings import apply_settings, resolve_key
from rlkit.train.presets import preset


def test_dotted_paths_of_any_depth_set_that_field_coerced_to_its_type():
    cfg = apply_settings(
        preset("smoke"),
        {"grpo.lr": "1e-4", "task.env.max_turns": "9", "recipe.eps_clip_high": "0.28"},
    )
    assert (cfg.grpo.lr, cfg.task.env.max_turns, cfg.recipe.eps_clip_high) == (1e-4, 9, 0.28)
    assert cfg.schedule == preset("smoke").schedule  # the sections nobody set stay as they were
    assert apply_settings(cfg, {}) is cfg


def test_a_bare_name_resolves_where_it_is_unique():
    cfg = apply_settings(
        preset("smoke"), {"steps": "3", "eps_clip_high": "0.28", "history": "none"}
    )
    assert (cfg.schedule.steps, cfg.recipe.eps_clip_high, cfg.task.history) == (3, 0.28, None)
    assert resolve_key(cfg, "capture_groups") == "schedule.capture_groups"
    assert resolve_key(Recipe(), "eps_clip_high") == "eps_clip_high"  # a flat config too
    assert apply_settings(Recipe(), {"kl_loss_coef": "0"}).kl_loss_coef == 0.0


def test_an_ambiguous_bare_name_lists_the_dotted_candidates():
    with pytest.raises(UsageError) as e:
        apply_settings(preset("smoke"), {"lr": "1e-4"})
    assert str(e.value) == "config key 'lr' is ambiguous: write one of warm_start.lr, grpo.lr"


def test_an_unknown_key_is_one_line_with_a_hint_and_what_is_valid():
    with pytest.raises(UsageError) as e:
        apply_settings(preset("smoke"), {"lr_lat": "1"})
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("unknown config key 'lr_lat' (did you mean grpo.lr_late?)")
    assert "valid are name, task.*, model.*" in str(e.value)
    with pytest.raises(UsageError, match=r"'grpo.lr_lat' \(did you mean grpo.lr_late\?\): valid"):
        apply_settings(preset("smoke"), {"grpo.lr_lat": "1"})
    with pytest.raises(UsageError, match="unknown recipe switch 'recipe.clip'"):
        apply_settings(preset("smoke"), {"recipe.clip": "1"})
    with pytest.raises(UsageError, match=r"unknown SkyRL preset setting 'nodez' \(did you mean"):
        get_preset("qwen3vl-8b", nodez=2)
    with pytest.raises(UsageError, match="'grpo.lr.x' goes below a plain value"):
        apply_settings(preset("smoke"), {"grpo.lr.x": "1"})


def test_a_section_alone_is_refused_unless_given_whole():
    for key in ("task.env", "env", "recipe"):
        with pytest.raises(UsageError, match=f"'{key}' is a section: set one of its fields"):
            apply_settings(preset("smoke"), {key: "3"})
    gspo = Recipe(policy_loss_type="gspo")
    both = apply_settings(preset("smoke"), {"eps_clip_high": "0.28", "recipe": gspo})
    assert both.recipe == Recipe(policy_loss_type="gspo", eps_clip_high=0.28)  # switches on top


@pytest.mark.parametrize("reverse", [False, True])
def test_recipe_switches_are_checked_together_whatever_their_order(reverse):
    changes = [("recipe.loss_reduction", "seq_mean_token_sum_norm"), ("max_seq_len", "12")]
    cfg = apply_settings(preset("smoke"), dict(reversed(changes) if reverse else changes))
    assert (cfg.recipe.loss_reduction, cfg.recipe.max_seq_len) == ("seq_mean_token_sum_norm", 12)
    sky = get_preset(
        "qwen3vl-8b", **dict(reversed(changes) if reverse else changes)
    )  # the same path for a SkyRL preset
    assert (sky.recipe.loss_reduction, sky.recipe.max_seq_len) == ("seq_mean_token_sum_norm", 12)
    with pytest.raises(UsageError, match="needs recipe.max_seq_len"):
        apply_settings(preset("smoke"), dict(changes[:1]))


def test_a_renamed_key_names_the_new_one():
    with pytest.raises(UsageError, match="'grpo.kl_coef' is now 'recipe.kl_loss_coef'"):
        apply_settings(preset("smoke"), {"grpo.kl_coef": "0.1"})
    with pytest.raises(UsageError, match="is now the recipe switch 'kl_loss_coef'"):
        get_preset("qwen3vl-8b", kl_coef=0.1)


def test_a_wrong_type_is_one_line_naming_the_key_as_given():
    with pytest.raises(UsageError, match="^steps takes an int, got 'many'$"):
        apply_settings(preset("smoke"), {"steps": "many"})
    with pytest.raises(UsageError, match="^model.constrained takes true or false"):
        apply_settings(preset("smoke"), {"model.constrained": "maybe"})


def test_get_preset_keeps_the_eval_sets_turn_budget_rule():
    assert get_preset("qwen3vl-8b", eval_set="test").task.max_turns == 12  # test's own budget
    assert get_preset("qwen3vl-8b", eval_set="test", max_turns="20").task.max_turns == 20
    assert get_preset("qwen3vl-8b", recipe={"eps_clip_high": 0.28}).recipe.eps_clip_high == 0.28


def test_a_skyrl_preset_travels_as_its_nested_json_and_an_unknown_setting_is_one_line():
    from rlkit.cluster.skyrl.presets import PRESETS, SkyRLPreset

    for sky in PRESETS.values():
        assert SkyRLPreset.from_json(sky.to_json()) == sky
    changed = get_preset("skyrl-tiny-cpu", prompts_per_node=16, hang_minutes=5, capture_keep=None)
    back = SkyRLPreset.from_json(changed.to_json())
    assert (back.batch.prompts_per_node, back.hang.minutes, back.capture.keep) == (16, 5, None)
    newer = changed.to_json().replace('"batch":{', '"batch":{"lr_warmup":3,')
    with pytest.raises(UsageError) as e:
        SkyRLPreset.from_json(newer)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("the job's preset: unknown config key 'batch.lr_warmup'")
    assert "rebuild the runtime image" in str(e.value)
