"""Bad input fails in one line that says what is wrong and how to fix it; usage errors exit 2.

Covers CLI arguments, `--set` config values, maze specs, dataset rows and env configs (what
SkyRL hands the env on the cluster), model directories, and cluster addresses and jobs
(unreachable, wrong scheme, unknown job, a job that fails), plus secrets passed as env vars.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ray.job_submission import JobStatus

from rlkit.cli import main as cli
from rlkit.cluster.client import connect
from rlkit.env.maze_env import MazeEnv
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.generation import generate

ROOT = Path(__file__).resolve().parent.parent
GOOD_MAZE = generate(3, 3, 0).to_dict()


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """Exit code and stderr of `rlkit ARGV` (argparse's own errors exit through SystemExit)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = int(e.code)
    return code, capsys.readouterr().err


def assert_one_line(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--set", "grpo.lr=fast"], ["grpo.lr takes a float", "'fast'"]),
        (["--set", "grpo"], ["write section.field=value"]),
        (["--set", "grpo.group_size=1"], ["group_size (1) must be >= 2"]),
        (["--set", "grpo.nope=1"], ["unknown config key 'grpo.nope'", "valid here are"]),
        (["--set", "task.env=3"], ["is a section: set one of its fields"]),
        (["--set", "task.env.max_turns=0"], ["max_turns (0) must be in [1, 1000]"]),
        (["--set", "model.constrained=maybe"], ["takes true or false"]),
        (["--set", "schedule.keep=0"], ["keep (0) must be >= 1"]),
        (["--set", "task.spec.height=0"], ["height must be an integer in [2, 16]"]),
        (["--set", "model.init=/nonexistent/model"], ["no config.json", "rlkit model tiny"]),
    ],
)
def test_bad_train_config_is_a_one_line_usage_error(capsys, tmp_path, argv, needles):
    code, err = run_cli(capsys, "train", "--preset", "smoke", "--run-dir", str(tmp_path), *argv)
    assert code == 2
    assert_one_line(err, "rlkit train: error:", *needles)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["train", "--preset", "huge", "--run-dir", "r"], ["unknown preset 'huge'", "smoke"]),
        (["maze", "--size", "0"], ["height must be an integer in [2, 16], got 0"]),
        (["maze", "--size", "100000"], ["height must be an integer in [2, 16]"]),
        (["maze", "--size", "3", "--placement", "random", "--min-path", "99"], ["min_path (99)"]),
        (["eval", "--policy", "/nonexistent/model"], ["neither random|oracle"]),
        (["eval", "--policy", "eps-oracle:2"], ["epsilon (2.0) must be in [0, 1]"]),
        (["eval", "--policy", "oracle", "--set", "nope"], ["unknown maze set 'nope'"]),
        (["eval", "--policy", "oracle", "--samples", "0"], ["samples (0) must be >= 1"]),
        (["data", "--out", "d", "--train", "0"], ["--train (0) must be >= 1"]),
        (["jobs", "status", "x", "--address", "ftp://h:8265"], ["unknown scheme ftp://"]),
        (["jobs", "status", "x", "--address", "ray://h:10001"], ["Ray Client", "http://HEAD:8265"]),
        (["jobs", "status", "x", "--address", "h:8265"], ["give a Jobs API URL"]),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(capsys, argv, needles):
    code, err = run_cli(capsys, *argv)
    assert code == 2
    assert_one_line(err, f"rlkit {argv[0]}: error:", *needles)


def test_argparse_errors_exit_2_naming_the_argument(capsys):
    code, err = run_cli(capsys, "train", "--preset", "smoke", "--run-dir", "r", "--resume", "x")
    assert code == 2 and "argument --resume: invalid choice: 'x'" in err.strip().splitlines()[-1]
    code, err = run_cli(capsys, "maze", "--size", "three")
    assert code == 2 and "argument --size: invalid int value: 'three'" in err


def test_model_directory_that_is_not_qwen3_vl(capsys, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    code, err = run_cli(capsys, "eval", "--policy", str(tmp_path))
    assert code == 2
    assert_one_line(err, "rlkit eval: error:", str(tmp_path), "llama", "qwen3_vl")


def test_usage_error_from_a_real_process():
    out = subprocess.run(
        [sys.executable, "-m", "rlkit.cli.main", "train", "--preset", "smoke", "--run-dir", "r"]
        + ["--set", "grpo.lr=fast"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert_one_line(out.stderr, "rlkit train: error: grpo.lr takes a float, got 'fast'")


def test_reader_that_leaves_early_stops_the_command_quietly():
    """`rlkit maze | head -0`: the pipe is closed before rlkit writes; no traceback, exit 141."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlkit.cli.main", "maze", "--size", "16"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == cli.SIGPIPE_EXIT and err == "", err


# -- dataset rows and env configs: what SkyRL hands the env on the cluster ----------------


def _spec(**changes) -> dict:
    return {**{k: v for k, v in GOOD_MAZE.items() if k != "hash"}, **changes}


@pytest.mark.parametrize(
    ("maze", "needle"),
    [
        ("{not json", "not a maze spec"),
        ([1, 2], "not a maze spec"),
        (_spec(walls=5), "not a maze spec"),
        (_spec(walls="00/000/000"), "not a maze spec"),
        (_spec(start=[0, 0, 1]), "(row, col) pair"),
        (_spec(start=[7, 7]), "outside the 3x3 grid"),
        (_spec(exit=list(GOOD_MAZE["start"])), "same cell"),
        ({**GOOD_MAZE, "hash": "0" * 64}, "hash does not match"),
        (_spec(walls="000/000/000"), "outer wall"),
    ],
)
def test_bad_maze_in_a_dataset_row_is_a_usage_error(maze, needle):
    with pytest.raises(UsageError, match=None) as info:
        MazeEnv({}, {"extra_info": {"maze": maze}})
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("env_config", "extras", "needle"),
    [
        ({"max_turns": "x"}, {}, "max_turns"),
        ({"style": 5}, {}, "style"),
        ({"nope": 1}, {}, "unknown env config keys ['nope']"),
        ({}, {"max_turns": "abc"}, "max_turns"),
        ({}, {}, "extra_info.maze"),
    ],
)
def test_bad_env_config_or_extras_is_a_usage_error(env_config, extras, needle):
    extras = {"maze": GOOD_MAZE, **extras} if extras or env_config else {}
    with pytest.raises(UsageError) as info:
        MazeEnv(env_config, extras)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_dataset_file_problems_say_how_to_regenerate(tmp_path):
    from rlkit.env.data import read_rows

    with pytest.raises(UsageError, match="rlkit data --out"):
        read_rows(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(UsageError, match="not a readable parquet file"):
        read_rows(junk)


# -- cluster: addresses, jobs, secrets ---------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def test_unreachable_address_fails_fast_in_one_line(capsys):
    address = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(RlkitError, match="cannot reach Ray Jobs API at") as info:
        connect(address, timeout_s=10)
    assert time.monotonic() - start < 60 and "\n" not in str(info.value)
    assert "dashboard port (8265)" in str(info.value)
    code, err = run_cli(capsys, "jobs", "list", "--address", address)
    assert code == 1
    assert_one_line(err, "rlkit jobs:", address)


def test_head_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts TCP connections (backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(RlkitError, match="did not answer within 3 s"):
            connect(address, timeout_s=3)
        assert time.monotonic() - start < 30


def test_credentials_in_pip_urls_are_masked():
    from rlkit.cluster.client import describe_submission

    text = describe_submission(
        "rlkit-x-1",
        "python -m rlkit.cli.main eval --policy oracle",
        {
            "working_dir": "/src",
            "env_vars": {"HF_TOKEN": "hf_secret123"},
            "pip": ["--extra-index-url https://user:pypi-secret456@pkgs.example/simple", "numpy"],
        },
        {"rlkit_run_name": "x"},
    )
    assert "hf_secret123" not in text and "pypi-secret456" not in text and "user:" not in text
    assert "HF_TOKEN=***" in text and "https://***@pkgs.example/simple numpy" in text


def test_unknown_job_id_is_a_one_line_error(ray_cluster, capsys):
    with pytest.raises(RlkitError, match="no job rlkit-missing-7"):
        ray_cluster.job("rlkit-missing-7")
    for sub in ("status", "logs", "stop"):
        code, err = run_cli(
            capsys, "jobs", sub, "rlkit-missing-7", "--address", ray_cluster.address
        )
        assert code == 1
        assert_one_line(err, "rlkit jobs:", "no job rlkit-missing-7", "rlkit jobs list")


@pytest.mark.slow
def test_job_failing_on_the_cluster_is_reported_and_secrets_stay_hidden(
    ray_cluster, tmp_path, capsys, monkeypatch
):
    secret = "tok-" + os.urandom(8).hex()
    code = "import os, sys; print('bad luck', len(os.environ['RLKIT_TEST_SECRET'])); sys.exit(3)"
    job = ray_cluster.submit(
        "failing", f'python -c "{code}"', runtime_env_vars={"RLKIT_TEST_SECRET": secret}
    )
    assert job.wait(300) == JobStatus.FAILED
    assert "bad luck" in job.logs() and secret not in job.logs()
    printed = [ray_cluster.last_submission, str(ray_cluster.summary()), repr(job)]
    for argv in (["list"], ["status", job.submission_id], ["logs", job.submission_id]):
        assert cli.main(["jobs", *argv, "--address", ray_cluster.address]) == 0
        out, err = capsys.readouterr()
        printed.append(out + err)
    assert "FAILED" in printed[-2] and "RLKIT_TEST_SECRET=***" in printed[0]
    assert not [p for p in printed if secret in p]
    # A training job that fails on the cluster: the CLI follows it and exits 1.
    rc = cli.main(
        ["train", "--preset", "smoke", "--run-dir", str(tmp_path / "r")]
        + ["--set", "model.init=/nonexistent/model", "--address", ray_cluster.address]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "FAILED" in out.strip().splitlines()[-1]
    assert "rlkit train: error: /nonexistent/model is not a model directory" in out


def test_secret_env_forwarded_by_submit_is_masked(capsys, monkeypatch):
    secret = "tok-" + os.urandom(8).hex()
    monkeypatch.setenv("RLKIT_TEST_SECRET", secret)
    code = cli.main(
        ["submit", "--preset", "qwen3vl-8b-6gpu", "--dry-run", "--env", "RLKIT_TEST_SECRET"]
    )
    out, err = capsys.readouterr()
    assert code == 0 and "RLKIT_TEST_SECRET=***" in out and secret not in out + err


def test_jobs_client_calls_are_bounded_when_the_head_goes_silent(ray_cluster):
    from rlkit.cluster.jobs import JobHandle

    stall = threading.Event()
    real_status = ray_cluster.client.get_job_status

    def hang(submission_id):
        stall.wait(120)  # a head that accepted the request and never answers
        return real_status(submission_id)

    saved = ray_cluster.request_timeout_s
    ray_cluster.client.get_job_status = hang
    ray_cluster.request_timeout_s = 1.0
    try:
        start = time.monotonic()
        with pytest.raises(RlkitError, match="did not answer within 2 s"):
            JobHandle(ray_cluster, "rlkit-anything-1").status()
        assert time.monotonic() - start < 20
    finally:
        stall.set()
        ray_cluster.client.get_job_status = real_status
        ray_cluster.request_timeout_s = saved
