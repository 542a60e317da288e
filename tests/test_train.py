"""The local trainer: resume equals an uninterrupted run, layout, config (its step's functions:
tests/test_step.py)."""

import json
from dataclasses import replace

import pytest
import torch

from rlkit.episodes.evaluate import EvalResult
from rlkit.episodes.rollout import load_trajectories
from rlkit.errors import UsageError
from rlkit.run.checkpoints import MARKER
from rlkit.settings import RENAMED
from rlkit.train.config import TrainConfig
from rlkit.train.presets import preset
from rlkit.train.run_config import config_changes
from rlkit.train.trainer import Trainer, train


def _cfg(**sched) -> TrainConfig:
    cfg = preset("smoke")
    return replace(cfg, schedule=replace(cfg.schedule, **sched))


FIRST_STEP_MAZES = {"grpo.mazes_per_step": "32"}
"""For a test that needs the first GRPO step to hold a group of mixed rewards (an update to
run) or a zero-variance one (all failed): smoke's 4 mazes x 4 episodes at a ~10-20% rollout
solve rate miss either now and then (a smoke GRPO step with no mixed group: 2 of 16 measured);
on 32 mazes the first step held 10-17 mixed groups and 15-22 zero-variance ones, all but at
most one all failed (seeds 0-3), so a CPU whose kernels sample other episodes still gets both
(~0.4 and ~0.6 a maze)."""


def _params(run_dir, step):
    from safetensors.torch import load_file

    return load_file(str(run_dir / f"global_step_{step}" / "policy" / "model.safetensors"))


def _metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in rows]


@pytest.mark.parametrize("dynamic", [False, True], ids=["one-round", "dynamic-sampling"])
def test_resume_equals_uninterrupted_run(tmp_path, dynamic):
    straight, split = tmp_path / "straight", tmp_path / "split"
    cfg = _cfg()
    if dynamic:  # rounds drawn until 4 groups teach: the cursor and seeds must still resume
        cfg = cfg.with_overrides(
            {"recipe.dynamic_sampling_type": "filter", "recipe.max_sample_batches": 3}
        )
    train(cfg, straight, progress=False)
    Trainer(cfg, split, progress=False).fit(stop_at_step=6)  # warm start 4 + 2 GRPO steps
    assert (split / MARKER).read_text().strip() == "6"
    summary = train(cfg, split, progress=False)  # resumes from global_step_6
    assert summary["steps"] == 8 and summary["grpo_steps"] == 4
    a, b = _params(straight, 8), _params(split, 8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _metrics(straight) == _metrics(split)
    steps = [r["step"] for r in _metrics(split) if "eval/solve_rate" not in r]
    assert steps == sorted(set(steps))  # no step lost or counted twice


def test_run_directory_layout(tmp_path):
    summary = train(_cfg(), tmp_path, progress=False)
    assert summary["warm_start_end"] == 4
    assert (tmp_path / MARKER).read_text().strip() == "8"
    ckpt = tmp_path / "global_step_8"
    assert (ckpt / "policy" / "config.json").exists() and (ckpt / "trainer_state.pt").exists()
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == [
        "global_step_6",
        "global_step_8",
    ]  # keep=2
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["preset"] == "smoke" and info["backend"] == "local"
    assert set(summary["solve_rate"]) == {0, 4, 6, 8}
    result = EvalResult.load(tmp_path / "evals" / "global_step_8.json")
    assert (
        result.step == 8
        and len(result.load_trajectories(tmp_path / "evals" / "global_step_8.json")) == 64
    )
    phases = {
        r["step"]: r["train/phase"]
        for r in _metrics(tmp_path)
        if "loss/bc" in r or "rollout/reward_mean" in r
    }
    assert phases == {
        1: "warm_start",
        2: "warm_start",
        3: "warm_start",
        4: "warm_start",
        5: "grpo",
        6: "grpo",
        7: "grpo",
        8: "grpo",
    }


def test_the_warm_start_turns_fine_near_its_target_and_resumes_in_that_phase(tmp_path):
    # fine from any validated rate: BC at fine_lr, validated after every step, from step 3
    cfg = _cfg().with_overrides({"warm_start.fine_from": 0.0, "warm_start.fine_lr": 1e-5})
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(cfg, straight, progress=False)
    rows = {r["step"]: r for r in _metrics(straight) if "loss/bc" in r}
    assert [rows[k]["train/lr"] for k in (1, 2, 3, 4)] == [cfg.warm_start.lr] * 2 + [1e-5] * 2
    assert sorted(k for k, r in rows.items() if "train/val_solve_rate" in r) == [2, 3, 4]
    Trainer(cfg, split, progress=False).fit(stop_at_step=3)  # resumes from step 2's state
    train(cfg, split, progress=False)
    assert _metrics(straight) == _metrics(split)
    with pytest.raises(UsageError, match="fine_from"):
        _cfg().with_overrides({"warm_start.fine_from": 1.5})


def test_dynamic_sampling_filter_draws_rounds_until_a_full_batch_of_groups_teaches(tmp_path):
    cfg = _cfg().with_overrides(
        {"recipe.dynamic_sampling_type": "filter", "recipe.max_sample_batches": "3"}
    )
    train(cfg, tmp_path, progress=False)
    n, group = cfg.grpo.mazes_per_step, cfg.grpo.group_size
    rows = [r for r in _metrics(tmp_path) if "rollout/rounds" in r]
    assert len(rows) == cfg.schedule.steps
    for r in rows:  # DAPO / SkyRL `filter`: rounds until n groups differ, then n of them train
        rounds, zero = r["rollout/rounds"], r["rollout/zero_variance_groups"]
        assert 1 <= rounds <= 3 and r["rollout/episodes"] == rounds * n * group
        assert r["train/groups"] == min(n, rounds * n - zero)
        assert rounds == 3 or rounds * n - zero >= n  # stopped early only with enough
    cursors = [r["train/cursor"] for r in rows]
    steps = [b - a for a, b in zip(cursors, cursors[1:], strict=False)]
    assert steps == [r["rollout/rounds"] * n for r in rows[1:]]


def test_fail_advantage_trains_on_the_groups_that_all_failed(tmp_path):
    base = _cfg(steps=1).with_overrides(FIRST_STEP_MAZES)  # smoke is plain GRPO
    assert base.recipe.fail_advantage is None
    train(base, tmp_path / "plain", progress=False)
    train(base.with_overrides({"recipe.fail_advantage": -1.0}), tmp_path / "fail", progress=False)
    plain, fail = (
        [r for r in _metrics(tmp_path / d) if "train/samples" in r] for d in ("plain", "fail")
    )
    # the same rollout (same weights and seed before the first GRPO step), more of it trained on
    assert plain[0]["rollout/reward_mean"] == fail[0]["rollout/reward_mean"]
    assert plain[0]["rollout/zero_variance_groups"] > 0
    assert fail[0]["train/samples"] > plain[0]["train/samples"]


def test_config_validation_and_overrides():
    cfg = preset("local-tiny").with_overrides(
        {"grpo.lr": "1e-4", "schedule.steps": "7", "grpo.lr_late": "none"}
    )
    assert cfg.grpo.lr == 1e-4 and cfg.schedule.steps == 7 and cfg.grpo.lr_late is None
    with pytest.raises(UsageError, match="group_size"):
        preset("smoke").with_overrides({"grpo.group_size": "1"})
    with pytest.raises(UsageError, match="unknown config key"):
        preset("smoke").with_overrides({"grpo.learning_rate": "1"})
    with pytest.raises(UsageError, match="unknown preset"):
        preset("huge")
    with pytest.raises(UsageError, match="takes a float"):
        preset("smoke").with_overrides({"grpo.lr": "fast"})
    with pytest.raises(UsageError, match=r"schedule\.seed \(-1\) must be >= 0"):
        preset("smoke").with_overrides({"schedule.seed": "-1"})
    with pytest.raises(UsageError, match=r"grpo\.turn_slack \(-1\) must be >= 0"):
        preset("smoke").with_overrides({"grpo.turn_slack": "-1"})
    with pytest.raises(UsageError, match=r"recipe\.max_sample_batches \(0\) must be >= 1"):
        preset("smoke").with_overrides({"recipe.max_sample_batches": "0"})
    with pytest.raises(UsageError, match=r"recipe\.fail_advantage \(0\.5\) must be < 0"):
        preset("smoke").with_overrides({"recipe.fail_advantage": "0.5"})
    with pytest.raises(UsageError, match="unknown recipe switch 'recipe.kl_coef'"):
        preset("smoke").with_overrides({"recipe.kl_coef": "0.1"})
    for old, new in RENAMED.items():  # the recipe's names replaced these: one line says which
        with pytest.raises(UsageError, match=f"is now '{new}'"):
            preset("smoke").with_overrides({old: "1"})
    with pytest.raises(UsageError, match="recipe.tis_ratio_type=token: the local trainer"):
        preset("smoke").with_overrides({"recipe.tis_ratio_type": "token"})
    with pytest.raises(UsageError, match=r"grpo\.tight_fraction \(1\.5\) must be in \[0, 1\]"):
        preset("smoke").with_overrides({"grpo.tight_fraction": "1.5"})


def test_torch_threads_are_the_setting_or_every_usable_core():
    import os

    from rlkit.train.trainer import torch_threads

    assert torch_threads(3) == 3 and torch_threads(None) == len(os.sched_getaffinity(0))


def test_config_changes_name_every_changed_field():
    old = preset("smoke").to_dict()
    new = preset("smoke").with_overrides({"grpo.lr": "1e-4", "task.history": "none"}).to_dict()
    assert config_changes(old, new) == {"grpo.lr": (3e-4, 1e-4), "task.history": (1, None)}
    assert config_changes(old, old) == {}
    del old["grpo"]["turn_slack"]  # a run.json older than the field: not compared
    assert config_changes(old, preset("smoke").to_dict()) == {}


def test_resume_none_refuses_existing_checkpoints(tmp_path):
    Trainer(_cfg(), tmp_path, progress=False).fit(stop_at_step=2)
    with pytest.raises(UsageError, match="already holds checkpoints"):
        train(_cfg(), tmp_path, resume="none", progress=False)


def test_kl_to_the_warm_start_policy_is_logged_and_the_reference_is_kept(tmp_path):
    cfg = _cfg(steps=1, eval_before_train=False)
    cfg = cfg.with_overrides({"recipe.kl_loss_coef": "0.05", **FIRST_STEP_MAZES})
    train(cfg, tmp_path, progress=False)
    grpo_rows = [r for r in _metrics(tmp_path) if "rollout/reward_mean" in r]
    assert grpo_rows and all("loss/kl" in r and r["loss/kl"] >= 0 for r in grpo_rows)
    assert (tmp_path / "reference_policy" / "config.json").exists()


def test_a_turn_slack_shortens_training_episodes_but_not_the_evals(tmp_path):
    cfg = _cfg(steps=2, eval_before_train=False).with_overrides(
        {"grpo.turn_slack": "0", "recipe.zero_variance_filter": "false"}
    )
    train(cfg, tmp_path, progress=False)
    rows = [r for r in _metrics(tmp_path) if "rollout/turns_mean" in r]
    assert len(rows) == 2 and all(r["rollout/turns_mean"] <= 8 for r in rows)  # 3x3: paths <= 8
    played = load_trajectories(next((tmp_path / "evals").glob("*.trajectories.jsonl")))
    assert {t.max_turns for t in played} == {cfg.task.env.max_turns}  # evals: the env's budget


def test_without_the_zero_variance_filter_every_turn_trains_and_groups_are_still_counted(
    tmp_path,
):
    cfg = _cfg(steps=1, eval_before_train=False).with_overrides(
        {"recipe.zero_variance_filter": "false", **FIRST_STEP_MAZES}
    )
    train(cfg, tmp_path, progress=False)
    (row,) = [r for r in _metrics(tmp_path) if "rollout/reward_mean" in r]
    assert row["rollout/zero_variance_groups"] > 0  # a rollout fact, filter or not
    assert row["train/samples"] == round(row["rollout/turns_mean"] * row["rollout/episodes"])


def test_seq_mean_token_sum_norm_needs_max_seq_len_and_then_trains(tmp_path):
    with pytest.raises(UsageError, match=r"recipe\.max_seq_len"):
        preset("smoke").with_overrides({"recipe.loss_reduction": "seq_mean_token_sum_norm"})
    cfg = _cfg(steps=1, eval_before_train=False).with_overrides(
        {
            "recipe.loss_reduction": "seq_mean_token_sum_norm",
            "recipe.max_seq_len": "12",
            **FIRST_STEP_MAZES,
        }
    )
    train(cfg, tmp_path, progress=False)  # crashed at the first GRPO update before
    (row,) = [r for r in _metrics(tmp_path) if "rollout/reward_mean" in r]
    assert row["train/samples"] > 0 and "loss/policy" in row


def test_resume_refuses_a_changed_recipe_and_records_a_changed_schedule(tmp_path):
    Trainer(_cfg(), tmp_path, progress=False).fit(stop_at_step=2)
    changed = _cfg().with_overrides({"grpo.lr": "1e-4", "grpo.epochs": "3"})
    with pytest.raises(UsageError) as e:
        train(changed, tmp_path, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "grpo.epochs 2 -> 3, grpo.lr 0.0003 -> 0.0001" in msg
    assert "new --run-dir" in msg
    assert json.loads((tmp_path / "run.json").read_text())["config"]["grpo"]["lr"] == 3e-4
    summary = train(_cfg(steps=5), tmp_path, progress=False)  # more steps: same recipe
    assert summary["grpo_steps"] == 5
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["config"]["schedule"]["steps"] == 5
    assert [(c["step"], c["changed"]) for c in info["config_changes"]] == [
        (2, {"schedule.steps": [4, 5]})
    ]


def test_a_resume_trains_with_the_run_json_config_without_repeating_the_sets(tmp_path):
    first = _cfg().with_overrides({"recipe.eps_clip_high": "0.28", "grpo.lr": "1e-4"})
    Trainer(first, tmp_path, progress=False).fit(stop_at_step=2)
    # the bare preset again (no --set), one explicit change a resume may make
    summary = train(preset("smoke"), tmp_path, progress=False, overrides={"schedule.steps": "5"})
    assert summary["grpo_steps"] == 5
    info = json.loads((tmp_path / "run.json").read_text())
    assert (
        info["config"]["recipe"]["eps_clip_high"] == 0.28 and info["config"]["grpo"]["lr"] == 1e-4
    )
    assert [(c["step"], c["changed"]) for c in info["config_changes"]] == [
        (2, {"schedule.steps": [4, 5]})
    ]
