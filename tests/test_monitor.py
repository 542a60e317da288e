"""The job monitor widget: status, log tail, curves, progress, Stop and resubmission."""

import io
import json
import re
import time

import pytest
from PIL import Image

from rlkit.errors import RlkitError, UsageError
from rlkit.notebook import monitor as m
from rlkit.run.rundir import RunDir


class FakeJob:
    """A job handle with the methods the monitor uses; statuses advance on each poll."""

    def __init__(self, statuses, lines=30):
        self.statuses = list(statuses)
        self.text = "".join(f"log line {i}\n" for i in range(lines))
        self.stopped = False
        self.calls = 0
        self.fail = False

    def status(self):
        self.calls += 1
        if self.fail:
            raise RlkitError("cluster at 10.0.0.1:8265 did not answer within 10 s")
        if self.stopped:
            return "STOPPED"
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def logs(self):
        return self.text

    def stop(self):
        self.stopped = True
        return True


def test_job_monitor_refresh_shows_status_logs_and_curves(tmp_path):
    run = RunDir(tmp_path / "run")
    job = FakeJob(["PENDING", "RUNNING"])
    mon = m.JobMonitor(job, run.path, refresh_s=5, log_lines=5)
    assert mon.status == "PENDING" and "PENDING" in mon.status_label.value
    assert mon.log_view.value == "\n".join(f"log line {i}" for i in range(25, 30))
    waiting = mon.curves.value
    assert waiting[:4] == b"\x89PNG"
    for s in range(4):
        run.append_metrics({"step": s, "rollout/reward_mean": s / 4, "rollout/solve_rate": s / 4})
    assert mon.refresh() == "RUNNING"
    assert mon.curves.value != waiting  # new metrics were plotted
    drawn = mon.curves.value
    mon.refresh()
    assert mon.curves.value is drawn  # nothing new: not re-drawn
    job.fail = True
    assert mon.refresh() == "RUNNING"
    assert "did not answer" in mon.status_label.value  # shown, not raised
    job.fail = False
    with run.metrics_path.open("a") as f:
        f.write("{torn\n" + '{"step": 9}\n')  # a corrupt line mid-file
    mon.refresh()
    assert "not JSON" in mon.status_label.value
    assert not mon.stop_button.disabled
    mon.stop_button.click()
    assert job.stopped and mon.status == "STOPPED" and mon.done
    assert mon.stop_button.disabled


def test_job_monitor_polling_thread_ends_with_the_job(tmp_path):
    job = FakeJob(["RUNNING", "RUNNING", "SUCCEEDED"])
    mon = m.JobMonitor(job, tmp_path / "run", refresh_s=0.01)
    mon.start_polling()
    mon._thread.join(5)
    assert not mon.polling and mon.status == "SUCCEEDED" and mon.done
    assert "SUCCEEDED" in mon.status_label.value
    assert mon.start_polling() is mon and not mon.polling  # a finished job is not polled again
    stuck = m.JobMonitor(FakeJob(["RUNNING"]), tmp_path / "run", refresh_s=0.01).start_polling()
    assert stuck.polling
    stuck.stop_polling()
    assert not stuck.polling and stuck._halt.is_set()
    with pytest.raises(UsageError, match="refresh_s"):
        m.JobMonitor(job, tmp_path, refresh_s=0)


def test_status_name_accepts_enums_and_strings():
    class Status:
        value = "running"

    assert m.status_name(Status()) == "RUNNING" and m.status_name("FAILED") == "FAILED"
    assert m.tail_lines("a\nb\nc\n", 2) == "b\nc" and m.tail_lines("a", 0) == ""


def test_job_monitor_switch_resubmits_failed_jobs_up_to_its_limit(tmp_path):
    submitted = []

    def resubmitter(job):
        submitted.append(FakeJob(["FAILED"]))
        submitted[-1].submission_id = f"rlkit-a-{len(submitted) + 1}"
        return submitted[-1]

    first = FakeJob(["FAILED"])
    first.submission_id = "rlkit-a-1"
    off = m.JobMonitor(first, tmp_path / "run", resubmitter=resubmitter)
    assert off.status == "FAILED" and not off.resubmit_switch.value and not submitted
    on = m.JobMonitor(first, tmp_path / "run", resubmit=2, resubmitter=resubmitter)
    on.refresh()  # every new job fails too: two restarts, then it stays FAILED
    assert on.status == "FAILED" and on.handle is submitted[1] and len(submitted) == 2
    assert on.restarts[-1].startswith("restart 2/2: rlkit-a-2 FAILED; resubmitted as rlkit-a-3")
    assert "restart 2/2" in on.status_label.value
    with pytest.raises(UsageError, match="resubmit"):
        m.JobMonitor(first, tmp_path, resubmit=-1)


def test_job_monitor_resubmits_a_failed_run_on_the_local_head(ray_cluster, tmp_path):
    """The switch on a real job: the first attempt fails, the resubmitted one succeeds."""
    state = tmp_path / "attempts"
    code = (
        f"import os, sys; p = {str(state)!r}; n = os.path.exists(p); "
        "open(p, 'a').write('x'); sys.exit(0 if n else 1)"
    )
    job = ray_cluster.submit("monitor-heal", f'python -c "{code}"')
    mon = m.JobMonitor(job, tmp_path / "run", refresh_s=1, resubmit=1)
    deadline = time.monotonic() + 120
    while mon.refresh() != "SUCCEEDED" and time.monotonic() < deadline:
        assert mon.status != "FAILED" or not mon.restarts, mon.handle.logs()[-1000:]
        time.sleep(1)
    assert mon.status == "SUCCEEDED" and state.read_text() == "xx"
    n = int(job.submission_id.rsplit("-", 1)[1])
    assert mon.handle.submission_id == f"rlkit-monitor-heal-{n + 1}"
    assert mon.restarts == [
        f"restart 1/1: {job.submission_id} FAILED; resubmitted as {mon.handle.submission_id} "
        "(it resumes from the run's last complete checkpoint)"
    ]


def test_the_monitor_shows_its_chart_at_the_size_it_was_drawn(tmp_path):
    run = RunDir(tmp_path / "run")
    run.append_metrics({"step": 1, "rollout/solve_rate": 0.5})
    mon = m.JobMonitor(FakeJob(["SUCCEEDED"]), run.path)
    width = Image.open(io.BytesIO(mon.curves.value)).size[0]
    assert mon.curves.layout.width == f"{width}px" and width >= 500


class RemoteJob(FakeJob):
    """A job on a remote cluster (no local head): the monitor may read its run through it."""

    def __init__(self, statuses):
        super().__init__(statuses)
        self.cluster = type("RemoteCluster", (), {"address": "http://10.0.0.1:8265"})()


def test_a_run_this_kernel_cannot_see_is_read_through_the_cluster_with_its_rollouts(
    tmp_path, monkeypatch
):
    from rlkit.episodes.policies import scripted_policy
    from rlkit.episodes.rollout import run_episodes
    from rlkit.maze.generation import generate
    from rlkit.run import open_run, remote
    from rlkit.run.backends import SummaryRun
    from rlkit.run.captures import write_step

    # the run's files as the cluster sees them (here: a real run dir read by open_run)
    there = RunDir(tmp_path / "there")
    there.init(preset="smoke", seed=0, backend="local")
    for s in range(3):
        there.append_metrics({"step": s, "rollout/reward_mean": s / 4})
    mazes = [generate(3, 3, seed=s) for s in (1, 2)]
    for step in (1, 2):  # captured training rollouts, on the cluster's storage only
        played = run_episodes(scripted_policy("eps-oracle:0.5"), mazes, samples=2, seed=step)
        write_step(there.path, step, _captured(step, played), keep=None)
    reads = []

    def read_run(cluster, path):
        reads.append((cluster.address, str(path)))
        return SummaryRun(open_run(there.path).summary())

    monkeypatch.setattr(remote, "read_run", read_run)
    missing = tmp_path / "fsx" / "run"  # not mounted in this kernel
    mon = m.JobMonitor(RemoteJob(["RUNNING"]), missing, refresh_s=5, remote_every_s=3600)
    assert reads == [("http://10.0.0.1:8265", str(missing))]
    assert "not visible from this kernel: read through the cluster every 3600 s" in (
        mon.progress.value
    )
    assert "step 2" in mon.progress.value and mon.curves.value[:4] == b"\x89PNG"
    # the newest captured step came with the summary: the player plays it, move bars included
    view = mon.rollouts
    assert view.step == 2 and len(view.episodes) == 4 and "(2 steps" in view.header.value
    assert player_data(view)["bars"][0]["p"] == pytest.approx(
        view.episodes[0].trajectory.turns[0].move_probs, abs=1e-4
    )
    mon.refresh()
    assert len(reads) == 1  # one small job per `remote_every_s`, not per refresh
    # a job on this machine's head (or no cluster): its files appear here; nothing to read
    local = m.JobMonitor(FakeJob(["RUNNING"]), missing, refresh_s=5)
    assert "not written yet" in local.progress.value and len(reads) == 1


@pytest.mark.parametrize(
    "collapsed",
    [
        {"loss/entropy": 0.05, "train/phase": "grpo"},  # the local trainer's names
        {"policy/policy_entropy": 0.05},  # SkyRL's, as its bridge writes them
    ],
)
def test_job_monitor_warns_beside_its_progress_when_entropy_collapses(tmp_path, collapsed):
    from rlkit.cluster.skyrl.bridge import rlkit_names

    run = RunDir(tmp_path / "run")
    skyrl = "policy/policy_entropy" in collapsed
    for s, entropy in enumerate([1.0, 0.9, 0.8]):
        step = (
            {"policy/policy_entropy": entropy} if skyrl else {**collapsed, "loss/entropy": entropy}
        )
        run.append_metrics({"step": s, **(rlkit_names(step) if skyrl else step)})
    mon = m.JobMonitor(FakeJob(["RUNNING"]), run.path, refresh_s=5)
    assert mon.warning == "" and "warning" not in mon.progress.value
    run.append_metrics({"step": 3, **(rlkit_names(collapsed) if skyrl else collapsed)})
    mon.refresh()
    assert mon.warning.startswith("entropy collapsing: 0.05 at step 3 is 5% of 1 at step 0")
    assert f"warning: {mon.warning}" in mon.progress.value and "<code>" in mon.progress.value


def player_data(view) -> dict:
    """What the rollouts panel's player holds: its one pane's frames, captions and bars."""
    m = re.search(
        r"<script type='application/json' class='rlkit-data'>(.*?)</script>", view.player.value
    )
    assert m, "the panel holds no player"
    (pane,) = json.loads(m.group(1))
    return pane


def _captured(step, trajs):
    from rlkit.run.captures import CapturedEpisode

    return [CapturedEpisode(step, t.maze_index, 0.5 - t.sample, t) for t in trajs]


def test_the_monitor_plays_the_newest_captured_training_step_as_steps_land(tmp_path, monkeypatch):
    from rlkit.episodes.policies import scripted_policy
    from rlkit.episodes.rollout import run_episodes
    from rlkit.maze.generation import generate
    from rlkit.notebook import rollouts
    from rlkit.notebook.rollouts import episode_label
    from rlkit.run.captures import write_step

    run = RunDir(tmp_path / "run")
    run.init(preset="smoke", seed=0, backend="local")
    mon = m.JobMonitor(FakeJob(["RUNNING"]), run.path, refresh_s=5)
    view = mon.rollouts
    assert view in mon.children and view.step is None and "none captured" in view.header.value
    mazes = [generate(3, 3, seed=s) for s in (1, 2)]
    policy = scripted_policy("eps-oracle:0.5")  # move probabilities on every turn
    write_step(run.path, 5, _captured(5, run_episodes(policy, mazes, samples=2, seed=5)), keep=3)
    mon.refresh()
    assert view.step == 5 and len(view.menu.options) == 4
    assert "step 5: 4 episodes of 2 groups" in view.header.value and "(1 steps" in view.header.value
    first = view.episodes[0]
    assert "<b>step 5, group 0, sample 0: reward" in view.player.value
    pane = player_data(view)  # each turn's frame, answer and bars, as the eval replays have them
    assert len(pane["frames"]) == len(first.trajectory.turns) + 1
    assert pane["text"][:-1] == [t.text for t in first.trajectory.turns]
    for turn, bars in zip(first.trajectory.turns, pane["bars"], strict=False):
        assert bars["p"] == pytest.approx(turn.move_probs, abs=1e-4)
    view.menu.value = 3  # group 1, sample 1
    assert view.menu.index == 3 and view.menu.label == episode_label(view.episodes[3])
    shown = view.player.value
    assert "<b>step 5, group 1, sample 1" in shown
    made = []
    monkeypatch.setattr(rollouts, "replay", lambda *a, **k: made.append(a))
    mon.refresh()
    assert view.player.value == shown and made == []  # nothing new: not rebuilt
    monkeypatch.undo()
    write_step(run.path, 6, _captured(6, run_episodes(policy, mazes, samples=2, seed=6)), keep=3)
    mon.refresh()
    assert view.step == 6 and "(2 steps" in view.header.value
    assert view.menu.value == view.menu.index == 3
    assert "<b>step 6, group 1, sample 1" in view.player.value
    (run.path / "rollouts" / "global_step_7.jsonl").write_text("{torn\n")  # a damaged file
    mon.refresh()
    assert view.step == 6 and "global_step_7.jsonl:1 is not a captured episode" in view.header.value
    assert mon.error is None  # said in the view; the rest of the monitor goes on


def test_the_monitor_labels_a_sampled_eval_of_another_set_under_no_set_of_its_own():
    from rlkit.notebook.progress import eval_labels

    record = {
        "eval/solve_rate": 0.5,
        "eval/seed_protocol": 1.0,
        "eval/solved": 32,
        "eval/mazes": 64,
        "eval/visgym-hard_solve_rate": 0.25,
        "eval/sampled_solve_rate": 0.4,
        "eval/sampled_seed_protocol": 0.0,
        "eval/sampled_samples": 4,
        "eval/sampled_visgym-hard_solve_rate": 0.2,
    }
    labels = eval_labels(record)
    assert labels[0] == "32/64 = 50.00% (seed's protocol)"
    assert labels[1] == "40.0% (sampled, 4 a maze)"
    assert labels[2:] == ("visgym-hard: 25.0%",)  # no set named "sampled_visgym-hard"
