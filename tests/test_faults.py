"""Crash and resume: SIGKILL at random points, torn and corrupted checkpoints, lock, full disk.

Every scenario ends by comparing against one uninterrupted `smoke` run with the same seed
(module fixture): the final weights bit for bit, metrics.jsonl minus `timing/*`, the data
cursor. Faults are placed with RLKIT_FAULT (rlkit/train/faults.py), so a kill lands inside the
rollout, the optimizer step or a checkpoint write deterministically; one kill per run lands
at a seeded random moment instead. Trainer processes run in their own session and are killed
with it when a test fails.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import time
import warnings
from pathlib import Path

import pytest
import torch
from ray.job_submission import JobStatus
from safetensors.torch import load_file
from trainer_process import TrainerProcess

from rlkit.cli import main as cli
from rlkit.cluster.launch import submit_training, training_entrypoint
from rlkit.errors import RlkitError
from rlkit.run.checkpoints import MARKER, CheckpointWarning, checkpoint_problem
from rlkit.run.rundir import RunDir
from rlkit.train import faults
from rlkit.train.presets import preset
from rlkit.train.trainer import Trainer, train

ROOT = Path(__file__).resolve().parent.parent
CKPT_STEPS = (2, 4, 6, 8)
"""Where `smoke` checkpoints: every 2 steps, the warm-start boundary (4) and the last step."""
PROCESS_TIMEOUT_S = 300.0


def _params(run: Path, step: int = 8) -> dict[str, torch.Tensor]:
    return load_file(str(run / f"global_step_{step}" / "policy" / "model.safetensors"))


def _metrics(run: Path) -> list[dict]:
    rows = RunDir(run).read_metrics()
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in rows]


def assert_equals_reference(run: Path, reference: Path) -> None:
    a, b = _params(reference), _params(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    got, want = _metrics(run), _metrics(reference)
    assert got == want
    steps = [r["step"] for r in got if "eval/solve_rate" not in r]
    assert steps == list(range(1, 9)), steps  # no step lost or counted twice
    cursor = [r["train/cursor"] for r in got if "train/cursor" in r]
    per_step = preset("smoke").grpo.mazes_per_step
    assert cursor == [per_step * i for i in range(1, 5)]  # no maze replayed or skipped
    assert (run / MARKER).read_text() == (reference / MARKER).read_text()


def expected_resume(run: Path) -> int | None:
    """The last complete checkpoint, judged here from the marker and the manifest alone."""
    marker = run / MARKER
    if not marker.exists():
        return None
    step = int(marker.read_text())
    assert checkpoint_problem(run / f"global_step_{step}") is None
    return step


def resume_line(run: Path, step: int | None) -> str | None:
    return None if step is None else f"resuming {run} from global_step_{step}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("reference") / "run"
    train(preset("smoke"), run, progress=False)
    return run


@pytest.fixture
def spawn(tmp_path):
    """Start `rlkit train --preset smoke` processes (forked ready-imported: trainer_process.py);
    whatever is left is killed at teardown."""
    started: list[tuple[TrainerProcess, Path]] = []

    def start(run: Path, fault: str | None = None) -> tuple[TrainerProcess, Path]:
        log = tmp_path / f"trainer-{len(started)}.log"
        argv = ["train", "--preset", "smoke", "--run-dir", str(run)]
        proc = TrainerProcess(argv, fault=fault, log=log, cwd=ROOT)
        started.append((proc, log))
        return proc, log

    yield start
    for proc, _ in started:
        if proc.poll() is None:
            proc.kill_group()
            proc.wait()


def wait_for(predicate, what: str, proc: TrainerProcess, log: Path) -> None:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(
                f"trainer exited ({proc.returncode}) before {what}: {log.read_text()[-2000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {PROCESS_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def trained_grpo_steps(reference: Path) -> list[int]:
    """The GRPO steps that trained a group in the reference run (this machine's trajectory,
    which every resumed run repeats bit for bit): only there is an `optimizer@N` fault reached,
    as a step whose groups are all zero-variance has no samples and skips the update."""
    rows = RunDir(reference).read_metrics()
    steps = [r["step"] for r in rows if r.get("train/samples", 0) > 0]
    assert steps, "no GRPO step of the reference run trained a group: no optimizer step to kill"
    return steps


def kill_plan(rng: random.Random, trained: list[int]) -> list[str]:
    """Hook kills in the order a run reaches them: each lies after the checkpoint it resumes from.
    `trained`: the GRPO steps that reach the optimizer (`trained_grpo_steps`)."""
    grpo_step = rng.choice(trained)
    ckpt_step = 8 if grpo_step > 6 else rng.choice([6, 8])
    return [
        f"optimizer@{rng.randint(3, 4)}:kill",  # warm start, inside the BC update
        "rollout@5:kill",  # first GRPO step: resumes exactly at the phase-boundary checkpoint
        f"optimizer@{grpo_step}:kill",  # weights half-updated in memory
        f"checkpoint@{ckpt_step}:kill",  # policy written, trainer state not: a torn checkpoint
    ]


@pytest.mark.slow  # training subprocesses
def test_sigkill_at_random_points_then_resume_equals_uninterrupted(
    reference, tmp_path, spawn, capfd
):
    run, rng = tmp_path / "run", random.Random(20260807)
    # Kill 1 at a random moment of the warm start, once the step-0 eval is on disk.
    proc, log = spawn(run)
    wait_for(lambda: len(RunDir(run).read_metrics()) >= 1, "the step-0 eval", proc, log)
    time.sleep(rng.uniform(0.0, 1.0))
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(PROCESS_TIMEOUT_S) == -signal.SIGKILL
    kills, resumed_from = 1, [expected_resume(run)]
    for fault in kill_plan(rng, trained_grpo_steps(reference)):
        proc, log = spawn(run, fault)
        assert proc.wait(PROCESS_TIMEOUT_S) == -signal.SIGKILL, log.read_text()[-2000:]
        kills += 1
        line = resume_line(run, resumed_from[-1])
        assert line is None or line in log.read_text(), (fault, log.read_text()[-2000:])
        step = int(fault.split("@")[1].split(":")[0])
        last = expected_resume(run)
        assert last == max((s for s in CKPT_STEPS if s < step), default=None), fault
        resumed_from.append(last)
    train(preset("smoke"), run, progress=False)  # in-process: spares one interpreter start
    assert resume_line(run, resumed_from[-1]) in capfd.readouterr().err
    assert kills >= 5 and 4 in resumed_from  # one resume right at the warm-start -> GRPO boundary
    assert_equals_reference(run, reference)


def test_resuming_a_finished_run_runs_nothing_and_changes_nothing(reference, tmp_path):
    run = tmp_path / "done"
    shutil.copytree(reference, run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and ".lock" not in p.name}
    summary = Trainer(preset("smoke"), run, progress=False).fit()
    assert summary["steps"] == 8 and summary["grpo_steps"] == 4
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and ".lock" not in p.name}
    changed = [
        str(p)
        for p in before.keys() | after.keys()
        if before.get(p) != after.get(p) and "tensorboard" not in str(p)
    ]
    assert not changed


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8] = bytes(
        b ^ 0xFF for b in data[len(data) // 2 : len(data) // 2 + 8]
    )
    path.write_bytes(bytes(data))


def _marker_behind(run: Path) -> None:
    (run / MARKER).write_text("6\n")  # the save of step 8 was renamed in, its marker never came


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (
            lambda run: _truncate(run / "global_step_8" / "policy" / "model.safetensors"),
            "truncated",
        ),
        (lambda run: _flip_bytes(run / "global_step_8" / "trainer_state.pt"), "corrupted"),
        (_marker_behind, "newer than the marker"),
    ],
    ids=["truncated", "corrupted", "no-marker"],
)
def test_damaged_last_checkpoint_is_skipped_and_the_previous_one_used(
    reference, tmp_path, damage, why, capfd
):
    run = tmp_path / "damaged"
    shutil.copytree(reference, run)
    damage(run)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CheckpointWarning)
        summary = Trainer(preset("smoke"), run, progress=False).fit()
    skipped = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(skipped) == 1 and why in skipped[0], skipped
    assert str(run / "global_step_8") in skipped[0] and "\n" not in skipped[0]
    assert f"resuming {run} from global_step_6" in capfd.readouterr().err
    assert summary["steps"] == 8
    assert_equals_reference(run, reference)


def test_keep_never_deletes_the_only_complete_checkpoint(tmp_path):
    run = RunDir(tmp_path, keep=1)

    def payload(d: Path) -> None:
        (d / "weights.bin").write_bytes(os.urandom(4096))

    for step in (1, 2, 3, 4):
        run.save_checkpoint(step, payload)
        torn = run.checkpoint_dir(step + 10)  # a later save that died before its marker
        torn.mkdir()
        (torn / "weights.bin").write_bytes(b"partial")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)
            assert run.latest_complete_checkpoint().step == step
        complete = [
            s for s in run.checkpoint_steps() if checkpoint_problem(run.checkpoint_dir(s)) is None
        ]
        assert complete == [step]
        # Damage it after the fact: the next save must still leave one complete checkpoint.
        (_truncate if step % 2 else _flip_bytes)(run.checkpoint_dir(step) / "weights.bin")


def _as_after_step_6(reference: Path, run: Path) -> None:
    """`run` as the reference stood right after saving step 6 (keep=2 had dropped step 4)."""
    shutil.copytree(reference, run)
    shutil.rmtree(run / "global_step_8")
    (run / MARKER).write_text("6\n")


@pytest.mark.slow  # training subprocesses
def test_second_trainer_refuses_and_a_killed_holder_frees_the_lock(
    reference, tmp_path, spawn, capsys
):
    run = tmp_path / "locked"
    _as_after_step_6(reference, run)
    holder, log = spawn(run, "rollout@7:pause=600")
    wait_for(lambda: "rlkit-fault: paused" in log.read_text(), "the pause", holder, log)
    assert cli.main(["train", "--preset", "smoke", "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is in use" in err and f"pid {holder.pid}" in err
    assert "stop that trainer or choose another run directory" in err
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(PROCESS_TIMEOUT_S) == -signal.SIGKILL
    train(preset("smoke"), run, progress=False)  # the kernel dropped the dead holder's flock
    assert_equals_reference(run, reference)


def test_full_disk_while_saving_stops_clearly_and_keeps_the_previous_checkpoint(
    reference, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "full"
    _as_after_step_6(reference, run)
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if str(f).endswith("trainer_state.pt"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    assert cli.main(["train", "--preset", "smoke", "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # before it: the resume line and save progress bars
    assert "Traceback" not in err and last.startswith("rlkit train: disk full while saving"), err
    assert "checkpoint global_step_8" in last and "global_step_6 is intact" in last
    assert "free space" in last
    assert expected_resume(run) == 6 and not (run / "global_step_8").exists()
    assert not list(run.glob(".global_step_*"))  # the half-written save was cleaned up
    monkeypatch.setattr(torch, "save", real_save)
    train(preset("smoke"), run, progress=False)
    assert_equals_reference(run, reference)


def _job_log_has(handle, text: str, timeout_s: float = PROCESS_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in handle.logs():
        status = handle.status()
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            raise AssertionError(f"job {status.value} before {text!r}: {handle.logs()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no {text!r} in the job's log within {timeout_s:.0f} s ({status.value}): "
                f"{handle.logs()[-2000:]}"
            )
        time.sleep(1.0)


@pytest.mark.slow
def test_ray_job_stopped_then_resubmitted_equals_uninterrupted(reference, ray_cluster, tmp_path):
    """A job stopped mid-checkpoint (`rlkit jobs stop`) ends STOPPED; resubmitted, it resumes
    and ends equal to the uninterrupted run; resubmitted once more, it trains nothing. (Jobs
    killed inside: the watcher's test below.)"""
    run = tmp_path / "job-run"
    stopped = ray_cluster.submit(
        run.name,
        training_entrypoint("smoke", run),
        runtime_env_vars={faults.ENV_VAR: "checkpoint@6:pause=600"},
    )
    assert "checkpoint@6:pause" not in ray_cluster.last_submission
    assert f"{faults.ENV_VAR}=***" in ray_cluster.last_submission
    try:
        _job_log_has(stopped, "rlkit-fault: paused at checkpoint@6", 2 * PROCESS_TIMEOUT_S)
        assert stopped.stop()
        assert stopped.wait(PROCESS_TIMEOUT_S) == JobStatus.STOPPED
    finally:
        stopped.stop()
    assert expected_resume(run) == 4
    # The researcher's way back: `rlkit train --address` (submit_training) resumes the run.
    final = submit_training("smoke", run, address=ray_cluster)
    try:
        assert final.wait(PROCESS_TIMEOUT_S) == JobStatus.SUCCEEDED, final.logs()[-2000:]
    finally:
        final.stop()
    assert f"resuming {run} from global_step_4" in final.logs()
    summary = json.loads(final.logs().strip().splitlines()[-1])
    assert summary["grpo_steps"] == 4 and summary["warm_start_end"] == 4
    assert_equals_reference(run, reference)
    trained = (run / "metrics.jsonl").read_text()
    again = submit_training("smoke", run, address=ray_cluster)  # a finished run: nothing to do
    assert again.wait(PROCESS_TIMEOUT_S) == JobStatus.SUCCEEDED, again.logs()[-2000:]
    assert json.loads(again.logs().strip().splitlines()[-1])["steps"] == 8
    assert (run / "metrics.jsonl").read_text() == trained  # nothing trained twice
    assert ray_cluster.reattach(run.name).submission_id == again.submission_id


def test_kill_while_building_the_initial_model_is_rebuilt_on_restart(reference, tmp_path):
    run = tmp_path / "torn-init"
    (run / "init_model").mkdir(parents=True)
    # save_pretrained writes config.json first: a kill right after leaves only that behind.
    shutil.copy(reference / "init_model" / "config.json", run / "init_model" / "config.json")
    Trainer(preset("smoke"), run, progress=False).fit(stop_at_step=1)
    want = load_file(str(reference / "init_model" / "model.safetensors"))
    got = load_file(str(run / "init_model" / "model.safetensors"))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.slow
def test_a_run_killed_twice_is_resubmitted_by_the_watcher_and_ends_as_uninterrupted(
    reference, ray_cluster, tmp_path
):
    """`rlkit jobs watch RUN --resubmit 2`: nobody resubmits; the run ends equal to one that
    was never interrupted (every step once, no maze replayed)."""
    from rlkit.cluster.watch import watch

    run = tmp_path / "healed-run"
    grpo_step = trained_grpo_steps(reference)[-1]  # 7 or 8 unless both trained no group
    # SIGKILL, each once, mid-training: in the warm start, then in a GRPO update
    kills = f"optimizer@3:once-kill,optimizer@{grpo_step}:once-kill"
    env = {faults.ENV_VAR: kills, faults.STATE_VAR: str(tmp_path / "fired")}
    ray_cluster.submit(run.name, training_entrypoint("smoke", run), runtime_env_vars=env)
    said: list[str] = []
    final = watch(
        ray_cluster,
        run.name,
        resubmit=2,
        poll_s=2.0,
        timeout_s=3 * PROCESS_TIMEOUT_S,
        say=said.append,
    )
    try:
        assert final.status() == JobStatus.SUCCEEDED, final.logs()[-2000:]
        assert [line.split(":")[0] for line in said[:2]] == ["restart 1/2", "restart 2/2"]
        assert final.submission_id == f"rlkit-{run.name}-3"
        assert sorted(p.name for p in (tmp_path / "fired").iterdir()) == [
            "optimizer@3",
            f"optimizer@{grpo_step}",
        ]
        assert "resuming" in final.logs()
        assert_equals_reference(run, reference)
    finally:
        final.stop()


def test_watch_refuses_negative_restarts_and_a_run_with_no_job(ray_cluster):
    from rlkit.cluster.watch import watch

    with pytest.raises(RlkitError, match="must be >= 0"):
        watch(ray_cluster, "nobody", resubmit=-1)
    with pytest.raises(RlkitError, match="no job for run 'nobody'"):
        watch(ray_cluster, "nobody", resubmit=1)


def test_a_job_whose_log_stops_growing_is_stopped_and_resubmitted(ray_cluster):
    """Hang detection: no new output for `stall_s` -> stop, count as failed, resubmit."""
    from rlkit.cluster.watch import watch

    code = "import time; print('step 1', flush=True); time.sleep(600)"
    ray_cluster.submit("hung-run", f'python -c "{code}"')
    said: list[str] = []
    with pytest.raises(RlkitError, match="rlkit-hung-run-2 stalled after 1 restart"):
        watch(ray_cluster, "hung-run", resubmit=1, poll_s=1.0, stall_s=4, say=said.append)
    assert said[0].endswith("wrote no output for 4 s: stopping it")
    assert said[1].startswith("restart 1/1: rlkit-hung-run-1 stalled; resubmitted as")
    assert ray_cluster.reattach("hung-run").status() == JobStatus.STOPPED
