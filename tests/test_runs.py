"""Run directory: atomic checkpoints, verification and fallback, keep-k, lock, disk full, metrics."""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlkit.errors import RlkitError, UsageError
from rlkit.run import rundir as runs
from rlkit.run.checkpoints import (
    MANIFEST,
    MARKER,
    Checkpoint,
    CheckpointWarning,
    checkpoint_problem,
)
from rlkit.run.rundir import RunDir


def payload(step: int):
    """A writer like the trainer's: an HF-style policy dir plus a trainer state file."""

    def write(d: Path) -> None:
        (d / "policy").mkdir()
        (d / "policy" / "model.safetensors").write_bytes(bytes([step % 256]) * 1000)
        (d / "policy" / "config.json").write_text(json.dumps({"step": step}))
        (d / "trainer_state.pt").write_bytes(b"state-%d" % step)

    return write


def hidden_dirs(run: RunDir) -> list[str]:
    return [p.name for p in run.path.iterdir() if p.name.startswith(".global_step")]


def test_save_layout_is_complete_and_marker_written_last(tmp_path):
    run = RunDir(tmp_path / "run")
    seen = {}

    def write(d: Path) -> None:
        seen["tmp"] = d
        seen["final_existed"] = run.checkpoint_dir(2).exists()
        seen["marker"] = run.marker_path.read_text()
        payload(2)(d)

    run.save_checkpoint(1, payload(1))
    ckpt = run.save_checkpoint(2, write)
    assert seen["tmp"].parent == run.path and seen["tmp"] != ckpt.path
    assert not seen["final_existed"] and seen["marker"] == "1\n"
    assert run.marker_path.read_text() == "2\n"
    files = sorted(p.relative_to(ckpt.path).as_posix() for p in ckpt.path.rglob("*"))
    assert files == [
        "policy",
        "policy/config.json",
        "policy/model.safetensors",
        MANIFEST,
        "trainer_state.pt",
    ]
    manifest = json.loads((ckpt.path / MANIFEST).read_text())
    assert manifest["step"] == 2
    assert manifest["files"]["policy/model.safetensors"]["size"] == 1000
    assert hidden_dirs(run) == []
    assert run.latest_complete_checkpoint() == Checkpoint(2, run.checkpoint_dir(2))


def test_corrupted_checkpoint_is_skipped_with_warning_naming_it(tmp_path):
    run = RunDir(tmp_path)
    run.save_checkpoint(1, payload(1))
    run.save_checkpoint(2, payload(2))
    f = run.checkpoint_dir(2) / "policy" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[10] ^= 0xFF  # same size, different bytes: only the hash sees it
    f.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match=r"global_step_2: .*sha256") as rec:
        ckpt = run.latest_complete_checkpoint()
    assert ckpt is not None and ckpt.step == 1
    assert len(rec) == 1 and "\n" not in str(rec[0].message)


def test_truncated_file_is_skipped(tmp_path):
    run = RunDir(tmp_path)
    run.save_checkpoint(1, payload(1))
    run.save_checkpoint(2, payload(2))
    with open(run.checkpoint_dir(2) / "trainer_state.pt", "r+b") as f:
        f.truncate(3)
    with pytest.warns(CheckpointWarning, match=r"global_step_2: trainer_state.pt .*truncated"):
        assert run.latest_complete_checkpoint(hashes=False).step == 1


def test_directories_the_marker_does_not_cover_are_skipped(tmp_path):
    run = RunDir(tmp_path)
    run.save_checkpoint(1, payload(1))
    # Killed after the rename but before the marker: complete bytes, not committed.
    run.save_checkpoint(2, payload(2))
    run.marker_path.write_text("1\n")
    # Killed inside write_fn on an older code path: no manifest at all.
    run.checkpoint_dir(3).mkdir()
    with pytest.warns(CheckpointWarning) as rec:
        assert run.latest_complete_checkpoint().step == 1
    messages = [str(w.message) for w in rec]
    assert any("global_step_3" in m and "marker" in m for m in messages)
    assert any("global_step_2" in m and "marker" in m for m in messages)


def test_no_marker_means_no_checkpoint(tmp_path):
    run = RunDir(tmp_path)
    assert run.latest_complete_checkpoint() is None
    run.save_checkpoint(1, payload(1))
    run.marker_path.unlink()
    with pytest.warns(CheckpointWarning, match=f"global_step_1: no {MARKER}"):
        assert run.latest_complete_checkpoint() is None


def test_skyrl_checkpoints_without_manifest_trust_the_marker(tmp_path):
    run = RunDir(tmp_path)
    for step in (10, 20):
        d = run.checkpoint_dir(step)
        (d / "policy").mkdir(parents=True)
        (d / "trainer_state.pt").write_bytes(b"x")
    run.marker_path.write_text("10")
    with pytest.warns(CheckpointWarning, match="global_step_20"):
        assert run.latest_complete_checkpoint(require_manifest=False).step == 10


def test_keep_k_keeps_newest_and_never_the_only_complete_one(tmp_path):
    run = RunDir(tmp_path, keep=2)
    for step in range(1, 5):
        run.save_checkpoint(step, payload(step))
    assert run.checkpoint_steps() == [3, 4]

    run = RunDir(tmp_path / "b", keep=1)
    run.save_checkpoint(1, payload(1))
    run.checkpoint_dir(9).mkdir()  # debris of a killed save at a later step
    run.save_checkpoint(2, payload(2))
    assert run.checkpoint_steps() == [2, 9]
    with pytest.warns(CheckpointWarning, match="global_step_9"):
        assert run.latest_complete_checkpoint().step == 2

    # Resumed from 2 after global_step_3 went bad: saving 3 again replaces the bad one.
    (run.path / "global_step_3").mkdir()
    (run.path / "global_step_3" / "junk").write_text("partial")
    run.save_checkpoint(3, payload(3))
    assert not (run.checkpoint_dir(3) / "junk").exists()
    assert run.checkpoint_steps() == [3, 9]


def test_keep_must_be_positive():
    with pytest.raises(UsageError, match=r"keep \(0\) must be >= 1"):
        RunDir("/nonexistent", keep=0)


def test_disk_full_in_writer_keeps_previous_checkpoint(tmp_path):
    run = RunDir(tmp_path)
    run.save_checkpoint(1, payload(1))

    def full_disk(d: Path) -> None:
        (d / "trainer_state.pt").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RlkitError, match=r"disk full .*global_step_2.*global_step_1 is intact"):
        run.save_checkpoint(2, full_disk)
    assert hidden_dirs(run) == [] and run.checkpoint_steps() == [1]
    assert run.marker_path.read_text() == "1\n"
    assert checkpoint_problem(run.checkpoint_dir(1)) is None


def test_disk_full_in_manifest_keeps_previous_checkpoint(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    run.save_checkpoint(1, payload(1))

    def no_space(directory: Path, step: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs, "write_manifest", no_space)
    with pytest.raises(RlkitError, match="disk full"):
        run.save_checkpoint(2, payload(2))
    assert hidden_dirs(run) == []
    assert run.latest_complete_checkpoint().step == 1


HOLDER = textwrap.dedent(
    """
    import sys, time
    from rlkit.run.rundir import RunDir
    lock = RunDir(sys.argv[1]).lock()
    lock.acquire()
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_second_trainer_is_refused_and_lock_dies_with_its_holder(tmp_path):
    run = RunDir(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RlkitError, match=rf"in use \(pid {holder.pid} on host"):
            run.lock().acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    with run.lock():
        assert f"pid {os.getpid()}" in (tmp_path / ".lock").read_text()
        with pytest.raises(RlkitError, match="in use"):
            run.lock().acquire()  # a second lock in the same process is refused too
    with run.lock():
        pass  # released by the with-block above


def test_metrics_append_truncate_and_resume(tmp_path):
    run = RunDir(tmp_path)
    for step in range(1, 6):
        run.append_metrics(
            {"step": step, "rollout/reward_mean": step / 10, "loss/kl": float("nan")}
        )
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4, 5]
    assert run.read_metrics()[0]["loss/kl"] is None  # NaN stored as null: strict JSON
    run.save_checkpoint(3, payload(3))
    ckpt = run.resume()
    assert ckpt is not None and ckpt.step == 3
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]
    run.append_metrics({"step": 4, "rollout/reward_mean": 0.4})
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4]
    with pytest.raises(UsageError, match="int 'step'"):
        run.append_metrics({"rollout/reward_mean": 1.0})


def test_torn_metrics_line_is_ignored_then_repaired(tmp_path):
    run = RunDir(tmp_path)
    run.append_metrics({"step": 1})
    with open(run.metrics_path, "a") as f:
        f.write('{"step": 2, "rollout/rew')  # killed mid-write
    assert [r["step"] for r in RunDir(tmp_path).read_metrics()] == [1]
    fresh = RunDir(tmp_path)
    fresh.append_metrics({"step": 2})
    assert run.metrics_path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_resume_without_checkpoint_drops_all_metrics(tmp_path):
    run = RunDir(tmp_path)
    run.append_metrics({"step": 0, "eval/solve_rate": 0.4})
    assert run.resume() is None
    assert run.read_metrics() == []


def test_run_json_records_versions_and_refuses_a_different_preset(tmp_path):
    run = RunDir(tmp_path)
    info = run.init(preset="smoke", seed=0, backend="local", config={"lr": 3e-4})
    assert info["versions"]["python"] == sys.version.split()[0]
    assert info["versions"]["torch"] and "rlkit" in info["versions"]
    assert "git_sha" in info and info["config"] == {"lr": 3e-4}
    assert json.loads(run.run_json.read_text()) == info
    assert run.init(preset="smoke", seed=0, backend="local") == info
    with pytest.raises(UsageError, match="seed=0, not 1"):
        run.init(preset="smoke", seed=1, backend="local")
