"""Widgets driven headless: set `.value`, check what they display (no browser, no kernel)."""

import io
import time

import numpy as np
import pytest
from PIL import Image

from rlkit.episodes.policies import Response, scripted_policy
from rlkit.episodes.rollout import run_episodes
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.core import Action, generate
from rlkit.maze.parsing import format_action
from rlkit.maze.render import to_ascii
from rlkit.maze.rules import initial
from rlkit.notebook import widgets as w
from rlkit.train.runs import RunDir

MAZE = generate(4, 4, seed=3)


class Scripted:
    """Answers from a fixed list, then 'up' forever: an episode with known turns."""

    name = "scripted"

    def __init__(self, answers):
        self.answers = list(answers)

    def act(self, states, messages, rngs):
        text = self.answers.pop(0) if self.answers else format_action(Action.UP)
        return [Response(text) for _ in states]


@pytest.fixture(scope="module")
def solved():
    return run_episodes(scripted_policy("oracle"), [MAZE])[0]


@pytest.fixture(scope="module")
def failed():
    return run_episodes(Scripted(["I think... left?", "no idea"]), [MAZE])[0]


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def has_colour(png: bytes, rgb) -> bool:
    return bool((pixels(png) == rgb).all(axis=-1).any())


def test_replay_frames_and_captions(solved, failed):
    assert solved.solved and not failed.solved
    frames = w.replay_frames(solved)
    captions = w.replay_captions(solved)
    assert len(frames) == len(captions) == len(solved.turns) + 1
    # the oracle's arrow on every playing frame, none once the episode is over
    assert all(has_colour(f, w.ORACLE_COLOUR) for f in frames[:-1])
    assert not has_colour(frames[-1], w.ORACLE_COLOUR)
    assert len({f for f in frames}) == len(frames)  # the agent moves every turn
    assert max(pixels(frames[0]).shape[:2]) == 256 // (16 * 4) * 16 * 4  # upscaled for display
    assert captions[0].text == solved.turns[0].text
    assert "oracle:" in captions[0].info and "parsed:" in captions[0].info
    assert captions[-1].info.startswith("end | SOLVED in")
    fails = w.replay_captions(failed)
    assert fails[0].text == "I think... left?" and "parsed: left" in fails[0].info
    assert "parse error" in fails[1].info and fails[1].text == "no idea"
    assert "FAILED: truncated" in fails[-1].info and "kind" in fails[-1].info
    # the model's move (orange) differs from the oracle's here, so both arrows show
    assert has_colour(w.replay_frames(failed)[0], w.MODEL_COLOUR)


def test_replay_widget_follows_slider_and_play(solved):
    rw = w.ReplayWidget(solved)
    assert rw.slider.max == len(solved.turns) == rw.play.max
    assert rw.image.value == rw.frames[0] and rw.text.value == solved.turns[0].text
    rw.slider.value = 2
    assert rw.image.value == rw.frames[2] and rw.text.value == solved.turns[2].text
    assert "turn 3/" in rw.info.value
    rw.play.value = 1  # what a Play tick does; jslink would do it in a browser
    assert rw.slider.value == 1 and rw.image.value == rw.frames[1]
    rw.slider.value = rw.slider.max
    assert "SOLVED" in rw.info.value and rw.text.value == ""


def test_checkpoint_diff_holds_last_frame_of_shorter_episode(solved, failed):
    dw = w.CheckpointDiffWidget(failed, solved, labels=("step 0", "step 40"))
    short, long_ = dw.panes[1], dw.panes[0]
    assert dw.slider.max == long_.n_frames - 1 > short.n_frames - 1
    dw.slider.value = 1
    assert short.image.value == short.frames[1] and long_.image.value == long_.frames[1]
    dw.slider.value = dw.slider.max
    assert short.image.value == short.frames[-1] and "SOLVED" in short.info.value
    assert long_.image.value == long_.frames[-1] and "FAILED" in long_.info.value
    other = run_episodes(scripted_policy("oracle"), [generate(4, 4, seed=4)])[0]
    with pytest.raises(UsageError, match="different mazes"):
        w.CheckpointDiffWidget(solved, other)
    with pytest.raises(UsageError, match="two names"):
        w.CheckpointDiffWidget(solved, solved, labels=("only one",))


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
    mon = w.JobMonitor(job, run.path, refresh_s=5, log_lines=5)
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
    mon = w.JobMonitor(job, tmp_path / "run", refresh_s=0.01)
    mon.start_polling()
    mon._thread.join(5)
    assert not mon.polling and mon.status == "SUCCEEDED" and mon.done
    assert "SUCCEEDED" in mon.status_label.value
    assert mon.start_polling() is mon and not mon.polling  # a finished job is not polled again
    stuck = w.JobMonitor(FakeJob(["RUNNING"]), tmp_path / "run", refresh_s=0.01).start_polling()
    assert stuck.polling
    stuck.stop_polling()
    assert not stuck.polling and stuck._halt.is_set()
    with pytest.raises(UsageError, match="refresh_s"):
        w.JobMonitor(job, tmp_path, refresh_s=0)


def test_status_name_accepts_enums_and_strings():
    class Status:
        value = "running"

    assert w.status_name(Status()) == "RUNNING" and w.status_name("FAILED") == "FAILED"
    assert w.tail_lines("a\nb\nc\n", 2) == "b\nc" and w.tail_lines("a", 0) == ""


def test_maze_browser_follows_controls():
    mb = w.maze_browser(size=4, seed=1)
    maze, png, text, stats = w.maze_view(4, 1, cell_px=w.browser_cell_px(4))
    assert mb.maze == maze and mb.image.value == png and "4x4 wilson seed 1" in mb.stats.value
    # drawn at its display size (~480 px), shown pixel for pixel; every toggle group labelled
    width = Image.open(io.BytesIO(png)).size[0]
    assert 400 <= width <= 520 and mb.image.layout.width == f"{width}px"
    assert [mb.algorithm.description, mb.placement.description, mb.view.description] == [
        "generator",
        "start/exit",
        "view",
    ]
    assert to_ascii(initial(maze)).splitlines()[1] in mb.ascii.value
    mb.size.value = 6
    assert mb.maze.height == 6 and "6x6" in mb.stats.value
    mb.algorithm.value = "dfs"
    assert mb.maze == generate(6, 6, 1, algorithm="dfs") and "dfs" in mb.stats.value
    assert mb.ascii.layout.display == "none" and mb.image.layout.display is None
    mb.view.value = "ASCII"
    assert mb.image.layout.display == "none" and mb.ascii.layout.display is None
    assert text != to_ascii(initial(mb.maze))


def test_job_monitor_switch_resubmits_failed_jobs_up_to_its_limit(tmp_path):
    submitted = []

    def resubmitter(job):
        submitted.append(FakeJob(["FAILED"]))
        submitted[-1].submission_id = f"rlkit-a-{len(submitted) + 1}"
        return submitted[-1]

    first = FakeJob(["FAILED"])
    first.submission_id = "rlkit-a-1"
    off = w.JobMonitor(first, tmp_path / "run", resubmitter=resubmitter)
    assert off.status == "FAILED" and not off.resubmit_switch.value and not submitted
    on = w.JobMonitor(first, tmp_path / "run", resubmit=2, resubmitter=resubmitter)
    on.refresh()  # every new job fails too: two restarts, then it stays FAILED
    assert on.status == "FAILED" and on.handle is submitted[1] and len(submitted) == 2
    assert on.restarts[-1].startswith("restart 2/2: rlkit-a-2 FAILED; resubmitted as rlkit-a-3")
    assert "restart 2/2" in on.status_label.value
    with pytest.raises(UsageError, match="resubmit"):
        w.JobMonitor(first, tmp_path, resubmit=-1)


def test_job_monitor_resubmits_a_failed_run_on_the_local_head(ray_cluster, tmp_path):
    """The switch on a real job: the first attempt fails, the resubmitted one succeeds."""
    state = tmp_path / "attempts"
    code = (
        f"import os, sys; p = {str(state)!r}; n = os.path.exists(p); "
        "open(p, 'a').write('x'); sys.exit(0 if n else 1)"
    )
    job = ray_cluster.submit("monitor-heal", f'python -c "{code}"')
    mon = w.JobMonitor(job, tmp_path / "run", refresh_s=1, resubmit=1)
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


def test_captions_name_the_oracles_move_up_too():
    """Action.UP is 0: the caption once read it as 'no move' and printed 'oracle: -'."""
    trajs = run_episodes(scripted_policy("oracle"), [generate(5, 5, seed=s) for s in range(8)])
    infos = [c.info for t in trajs for c in w.replay_captions(t)[:-1]]
    assert any("parsed: up" in i for i in infos)
    for info in infos:  # the oracle policy plays the oracle's move at every turn
        parsed = info.split("parsed: ")[1].split(" |")[0]
        assert f"oracle: {parsed} |" in info, info


def test_the_monitor_shows_its_chart_at_the_size_it_was_drawn(tmp_path):
    run = RunDir(tmp_path / "run")
    run.append_metrics({"step": 1, "rollout/solve_rate": 0.5})
    mon = w.JobMonitor(FakeJob(["SUCCEEDED"]), run.path)
    width = Image.open(io.BytesIO(mon.curves.value)).size[0]
    assert mon.curves.layout.width == f"{width}px" and width >= 500
