"""A run's progress as the demo's terminal bar and the job monitor show it."""

import io
import time

from rlkit.notebook import monitor as m
from rlkit.notebook.progress import RunFollower, read_progress
from rlkit.run.rundir import RunDir
from rlkit.train.presets import preset


def _run(tmp_path, grpo_steps_done: int) -> RunDir:
    """A run dir as the trainer writes it: run.json, 3 warm-start steps, then GRPO steps."""
    run = RunDir(tmp_path / "run")
    cfg = preset("smoke").with_overrides({"schedule.steps": 8})
    run.init(preset="smoke", seed=0, backend="local", config=cfg.to_dict())
    run.append_metrics({"step": 0, "eval/solve_rate": 0.2, "eval/ci_low": 0.1, "eval/ci_high": 0.3})
    for s in range(1, 4):
        run.append_metrics(
            {"step": s, "loss/bc": 1.0, "train/phase": "warm_start", "timing/elapsed_s": s * 1.0}
        )
    for k in range(grpo_steps_done):
        s = 4 + k
        record = {"step": s, "rollout/episodes": 16, "train/phase": "grpo"}
        run.append_metrics(record | {"timing/elapsed_s": 3.0 + 2.0 * (k + 1)})
    if grpo_steps_done >= 2:
        run.append_metrics(
            {
                "step": 5,
                "eval/solve_rate": 0.5,
                "eval/ci_low": 0.4,
                "eval/ci_high": 0.6,
                "train/phase": "grpo",
            }
        )
    return run


def test_progress_names_phase_step_of_total_eval_and_eta(tmp_path):
    assert read_progress(tmp_path / "empty").line() == "starting: no step logged yet"
    warm = read_progress(_run(tmp_path / "a", 0).path)
    assert warm.phase == "warm start" and warm.step == 3 and warm.eta_s is None
    assert warm.line() == "warm start, step 3 | eval step 0: 20.0% [10.0%, 30.0%]"
    p = read_progress(_run(tmp_path / "b", 2).path)
    assert (p.phase, p.grpo_step, p.grpo_total) == ("GRPO", 2, 8)
    assert p.eta_s == 6 * 2.0  # 2 s per GRPO step so far, 6 steps left
    assert p.line() == "GRPO step 2/8 | eval step 5: 50.0% [40.0%, 60.0%] | ETA 12 s"


def test_the_eta_follows_the_pace_of_the_last_ten_grpo_steps(tmp_path):
    """Early GRPO steps cost the most: the ETA uses the recent pace, not the average since."""
    run = RunDir(tmp_path / "run")
    cfg = preset("smoke").with_overrides({"schedule.steps": 40})
    run.init(preset="smoke", seed=0, backend="local", config=cfg.to_dict())
    run.append_metrics(
        {"step": 1, "loss/bc": 1.0, "train/phase": "warm_start", "timing/elapsed_s": 5.0}
    )
    clock = 5.0
    for k in range(20):  # ten steps of 8 s, then ten of 2 s
        clock += 8.0 if k < 10 else 2.0
        run.append_metrics(
            {
                "step": 2 + k,
                "rollout/episodes": 16,
                "train/phase": "grpo",
                "timing/elapsed_s": clock,
            }
        )
    p = read_progress(run.path)
    assert p.grpo_step == 20
    assert p.pace_s == 2.0 and p.eta_s == 20 * 2.0  # the average since the start would say 100
    early = read_progress(run.path, run.read_metrics()[:4])  # warm start + 3 GRPO steps
    assert early.pace_s == 8.0 and early.eta_s == 37 * 8.0


def test_in_a_log_the_follower_writes_plain_lines(tmp_path):
    out = io.StringIO()
    run = _run(tmp_path, 0)
    with RunFollower(run.path, poll_s=0.05, file=out) as follower:
        deadline = time.monotonic() + 10
        while follower.last is None and time.monotonic() < deadline:  # its first read
            time.sleep(0.02)
        for k in range(3):
            run.append_metrics(
                {
                    "step": 10 + k,
                    "rollout/episodes": 16,
                    "train/phase": "grpo",
                    "timing/elapsed_s": 10.0 + k,
                }
            )
        time.sleep(0.3)
    assert follower.last.grpo_step == 3 and follower.last.grpo_total == 8
    # not a terminal: plain lines, the first at once, then at most every 30 s, and the last
    lines = out.getvalue().splitlines()
    assert lines == [
        "training: warm start, step 3 | eval step 0: 20.0% [10.0%, 30.0%]",
        "training: GRPO step 3/8 | eval step 0: 20.0% [10.0%, 30.0%] | ETA 15 s",
    ]


def test_on_a_terminal_it_is_a_tqdm_bar(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    with RunFollower(_run(tmp_path, 2).path, poll_s=0.05, file=out):
        time.sleep(0.3)
    text = out.getvalue()
    assert "\r" in text and "2/8" in text and "eval step 5: 50.0% [40.0%, 60.0%]" in text


def test_the_job_monitor_shows_the_same_line(tmp_path):
    class Running:
        def status(self):
            return "RUNNING"

        def logs(self):
            return ""

        def stop(self):
            return True

    run = _run(tmp_path, 2)
    mon = m.JobMonitor(Running(), run.path)
    assert read_progress(run.path).line() in mon.progress.value


def test_a_skyrl_runs_steps_are_all_grpo(tmp_path):
    """SkyRL's warm start (rlkit's tiny model) is built before its step 0; its bridge logs
    `rollout/reward_mean` at every training step and no `train/phase`."""
    run = RunDir(tmp_path / "sky")
    run.init(preset="skyrl-tiny-cpu", seed=0, backend="skyrl")
    run.append_metrics({"step": 0, "eval/solve_rate": 0.25})
    for s in (1, 2, 3):
        run.append_metrics({"step": s, "rollout/reward_mean": 0.5, "timing/elapsed_s": 10.0 * s})
    progress = read_progress(run.path)
    assert (progress.phase, progress.step, progress.grpo_step) == ("GRPO", 3, 3)
    assert progress.line().startswith("GRPO step 3 | eval step 0: 25.0%")
