"""Stability signals on both backends' names, the collapse warning, and their figure."""

import math

import pytest

from rlkit.cluster.skyrl.bridge import rlkit_names
from rlkit.errors import UsageError
from rlkit.notebook.curves import stability_curves
from rlkit.run import stability as st
from rlkit.run.metrics import RunLogger
from rlkit.run.rundir import RunDir

SKYRL_STEP = {  # the stability keys a real SkyRL CPU run's driver log shows, in SkyRL's names
    "policy/policy_entropy": 1.2,
    "policy/loss_metrics/clip_ratio": 0.05,
    "policy/grad_norm": 0.72,
    "policy/rollout_train_logprobs_abs_diff_mean": 0.01,
    "policy/rollout_train_logprobs_abs_diff_max": 0.4,
    "environment/turns_mean": 7.5,
    "generate/avg_assistant_tokens": 60.0,
    "generate/avg_num_tokens": 300.0,
    "reward/num_zero_variance_filtered": 2,
}


def local_step(step, entropy, phase="grpo", **extra):
    """A step as the local trainer logs it (rlkit.train.step / grpo / trainer names)."""
    return {
        "loss/entropy": entropy,
        "loss/clip_fraction": 0.1,
        "loss/grad_norm": 0.5,
        "rollout/turns_mean": 6.0,
        "rollout/zero_variance_groups": 1,
        "train/groups": 3,
        "train/phase": phase,
        **extra,
    }


def test_signals_resolve_on_a_local_metrics_jsonl(tmp_path):
    run = RunDir(tmp_path / "local")
    with RunLogger(run, ray_gauges=False) as log:
        for s in range(3):
            log.log(s, local_step(s, 1.0))
    found = st.resolve(run.read_metrics())
    assert found == {
        "entropy": ["loss/entropy"],
        "clip fraction": ["loss/clip_fraction"],
        "zero-variance groups (share)": [st.ZERO_VARIANCE_SHARE],
        "turns": ["rollout/turns_mean"],
        "grad norm": ["loss/grad_norm"],
    }  # no logprob gap (0 by construction) and no token counts locally
    assert st.zero_variance_share(run.read_metrics()[0]) == pytest.approx(0.25)


def test_signals_resolve_on_skyrl_names_through_the_bridge():
    record = {"step": 1, **rlkit_names(SKYRL_STEP), "rollout/groups": 8.0}
    found = st.resolve([record])
    assert set(found) == set(st.SIGNALS)  # every signal, in rlkit's names
    assert found["clip fraction"] == ["loss/clip_fraction"]
    assert found["turns"] == ["rollout/turns_mean"]
    assert st.with_derived(record)[st.ZERO_VARIANCE_SHARE] == pytest.approx(0.25)
    assert st.zero_variance_share({"rollout/zero_variance_groups": 2}) is None  # no total


def test_warnings_fire_on_an_entropy_collapse_and_a_large_gap():
    warm = [{"step": s, **local_step(s, 0.05, phase="warm_start")} for s in range(2)]
    healthy = warm + [{"step": 2 + s, **local_step(2 + s, 1.0 - 0.1 * s)} for s in range(6)]
    assert st.stability_warnings(healthy) == [] and st.warning_line(healthy) == ""
    # the warm start's low entropy is not the baseline: GRPO's first step (1.0) is
    collapsed = healthy + [{"step": 9, "loss/entropy": 0.1}]
    (line,) = st.stability_warnings(collapsed)
    assert line.startswith("entropy collapsing: 0.1 at step 9 is 10% of 1 at step 2")
    assert st.grpo_entropies(collapsed)[0] == (2, 1.0)
    gap = "loss/rollout_train_logprobs_abs_diff_mean"
    skyrl = [{"step": s, "loss/entropy": 1.0, gap: 0.02 * (s + 1)} for s in range(6)]
    assert st.stability_warnings(skyrl[:5]) == []  # 0.1 is the limit, not past it
    (line,) = st.stability_warnings(skyrl)
    assert "logprob gap 0.12 at step 5 is past 0.1" in line
    both = st.warning_line(skyrl + [{"step": 6, "loss/entropy": 0.0, gap: math.nan}])
    assert "entropy collapsing" in both and "; " in both and "0.12 at step 5" in both


def test_stability_figure_has_a_panel_per_logged_signal(tmp_path):
    records = [{"step": s, **local_step(s, 1.0 - 0.1 * s)} for s in range(10)]
    fig = stability_curves(records, run_id="local")
    labels = [ax.get_ylabel().replace("\n", " ") for ax in fig.axes]
    assert labels == [
        "entropy",
        "clip fraction",
        "zero-variance groups (share)",
        "turns",
        "grad norm",
    ]
    assert "entropy collapsing" in " ".join(t.get_text() for t in fig.texts)
    skyrl = [{"step": s, **rlkit_names(SKYRL_STEP), "rollout/groups": 8.0} for s in range(3)]
    fig = stability_curves(skyrl)
    assert [ax.get_ylabel().replace("\n", " ") for ax in fig.axes] == list(st.SIGNALS)
    with pytest.raises(UsageError, match="no stability metrics"):
        stability_curves([{"step": 0, "rollout/reward_mean": 0.5}])


def grpo_run(entropies, solves):
    """GRPO steps 1.. with these entropies and rollout solve rates (as the local trainer logs)."""
    return [
        {"step": s, **local_step(s, e, **{"rollout/solve_rate": v, "rollout/reward_mean": v})}
        for s, (e, v) in enumerate(zip(entropies, solves, strict=True), start=1)
    ]


# Entropy 0.93 -> 0.1 (11% of the start) in both: only the rewards tell them apart.
FALLING = [0.93, 0.8, 0.6, 0.45, 0.3, 0.2, 0.15, 0.12, 0.11, 0.1]
CONVERGING = [0.26, 0.4, 0.55, 0.7, 0.8, 0.88, 0.92, 0.95, 0.96, 0.97]  # groups all succeed
STUCK = [0.26, 0.3, 0.28, 0.25, 0.27, 0.22, 0.2, 0.24, 0.21, 0.2]  # sure of failing moves


def test_entropy_falling_as_groups_all_succeed_is_convergence_not_a_warning():
    records = grpo_run(FALLING, CONVERGING)
    fall = st.entropy_fall(records)
    # the last 5 steps' solve rates: (0.88 + 0.92 + 0.95 + 0.96 + 0.97) / 5 = 0.936 >= 0.9
    assert fall.kind == "convergence" and fall.solve == pytest.approx(0.936)
    assert st.stability_warnings(records) == [] and st.warning_line(records) == ""
    (note,) = st.stability_notes(records)
    assert note == (
        "entropy converging: 0.1 at step 10 is 11% of 0.93 at step 1, as groups all succeed "
        "(rollout solve rate 94% over the last 5 steps)"
    )
    fig = stability_curves(records)
    header = " ".join(t.get_text() for t in fig.texts)
    assert "entropy converging; no stability warning" in header and "collaps" not in header


def test_entropy_falling_with_rewards_stuck_is_a_collapse_warning():
    records = grpo_run(FALLING, STUCK)
    # (0.22 + 0.2 + 0.24 + 0.21 + 0.2) / 5 = 0.214 < 0.9
    assert st.entropy_fall(records).solve == pytest.approx(0.214)
    (line,) = st.stability_warnings(records)
    assert line.startswith("entropy collapsing: 0.1 at step 10 is 11% of 0.93 at step 1")
    assert "rewards stuck: rollout solve rate 21% over the last 5 steps, under the 90%" in line
    assert st.stability_notes(records) == []
    assert "entropy collapsing" in " ".join(t.get_text() for t in stability_curves(records).texts)


def test_the_judgement_needs_the_fall_and_reads_the_solve_rate_up_to_it():
    assert st.entropy_fall(grpo_run(FALLING[:6], STUCK[:6])) is None  # 0.2 is 22% of 0.93
    # a SkyRL run logs the reward, not the rate: the reward judges; the solve rate wins if both
    skyrl = [{"step": s, "loss/entropy": e, "rollout/reward_mean": v} for s, e, v in
             zip(range(10), FALLING, CONVERGING, strict=True)]  # fmt: skip
    assert st.entropy_fall(skyrl).kind == "convergence"
    # 89.9% is not converged: (0.9 + 0.9 + 0.9 + 0.9 + 0.895) / 5 = 0.899
    near = grpo_run(FALLING, [*STUCK[:5], 0.9, 0.9, 0.9, 0.9, 0.895])
    assert st.entropy_fall(near).kind == "collapse"


def stalled_run(solve, steps=10):
    """GRPO step 1 trains 8 of 16 groups (entropy 0.33); then every group is zero-variance, so
    no step trains and none logs an entropy (the local trainer's records, a real collapse's
    shape: no warm start, lr 2e-2, 8 epochs, 16 mazes x 8)."""
    first = {"step": 1, **local_step(1, 0.33, **{"rollout/solve_rate": 0.15})}
    first |= {"rollout/zero_variance_groups": 8, "train/groups": 8}
    rest = [
        {"step": s, "train/phase": "grpo", "rollout/solve_rate": solve,
         "rollout/zero_variance_groups": 16, "rollout/groups": 16, "train/groups": 0}
        for s in range(2, steps + 1)
    ]  # fmt: skip
    return [{"step": 0, "eval/solve_rate": 0.19, "train/phase": "grpo"}, first, *rest]


def test_no_group_training_with_rewards_stuck_is_a_warning_though_no_entropy_fell():
    records = stalled_run(0.03)
    assert st.entropy_fall(records) is None  # one entropy logged: nothing to judge a fall on
    (line,) = st.stability_warnings(records)
    assert line == (
        "no gradient: every group zero-variance in each of the last 5 GRPO steps (steps 6-10) "
        "with rollout solve rate 3%, under the 90% of convergence: the episodes no longer "
        "differ, so nothing trains (entropy last logged 0.33 at step 1): a collapsed policy, "
        "or a task beyond it"
    )
    assert st.warning_line(records) == line and st.stability_notes(records) == []
    header = " ".join(t.get_text() for t in stability_curves(records).texts)
    assert "no gradient" in header


def test_no_gradient_needs_five_untrained_steps_and_rewards_under_convergence():
    assert st.no_gradient(stalled_run(0.03, steps=5)) is None  # steps 2-5: four untrained
    assert st.no_gradient(stalled_run(0.03, steps=6)) is not None
    assert st.no_gradient(stalled_run(0.95)) is None  # groups all succeed: converged
    one_trains = stalled_run(0.03)
    one_trains[-2] |= {"rollout/zero_variance_groups": 15, "train/groups": 1}
    assert st.no_gradient(one_trains) is None
    # SkyRL's counts (through the bridge): the reward stands in for the solve rate
    skyrl = [{"step": s, "loss/entropy": 1.0, "rollout/reward_mean": 0.0,
              "rollout/zero_variance_groups": 8, "rollout/groups": 8} for s in range(6)]  # fmt: skip
    assert "rollout solve rate 0%" in st.no_gradient(skyrl)


def test_a_real_stall_on_the_smoke_preset_warns_no_gradient(tmp_path, capsys):
    """A real run whose groups never differ: the smoke preset with a 1-turn budget, which no
    episode can meet (every maze's exit is >= 2 moves away, one move a turn), so every group
    fails on every step, whatever the CPU's float kernels sample: no group trains, no entropy
    is logged, and `rlkit train` ends with the warning (the entropy rule, holding none, says
    nothing). A collapsed policy ends the same way (`stalled_run`), but whether a given
    trajectory collapses is luck."""
    import json

    from rlkit.cli.main import main

    overrides = {
        "warm_start.enabled": False,
        "task.env.max_turns": 1,
        "grpo.solvable_only": False,  # else no maze of the stream is drawn at all
        "schedule.steps": 6,
        "schedule.eval_every": 6,
        "schedule.ckpt_every": 6,
        "schedule.threads": 1,
    }
    sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"), *sets]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["solve_rate"] == {"0": 0.0, "6": 0.0}
    records = RunDir(tmp_path / "run").read_metrics()
    assert st.entropy_fall(records) is None
    (line,) = st.stability_warnings(records)
    assert line.startswith("no gradient: every group zero-variance in each of the last 5 GRPO")
    assert "rollout solve rate 0%" in line and "no entropy logged" in line
    assert f"warning: {line}" in err.splitlines()
