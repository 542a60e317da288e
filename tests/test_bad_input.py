"""Bad input fails in one line that says what is wrong and how to fix it; usage errors exit 2.

Covers CLI arguments, `--set` config values, maze specs, dataset rows and env configs (what
SkyRL hands the env on the cluster), model directories, and cluster addresses and jobs
(unreachable, wrong scheme, unknown job, a job that fails), plus secrets passed as env vars.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlkit import cli
from rlkit.env import MazeEnv
from rlkit.errors import UsageError
from rlkit.maze import generate

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
        [sys.executable, "-m", "rlkit.cli", "train", "--preset", "smoke", "--run-dir", "r"]
        + ["--set", "grpo.lr=fast"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert_one_line(out.stderr, "rlkit train: error: grpo.lr takes a float, got 'fast'")


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
    from rlkit.data import read_rows

    with pytest.raises(UsageError, match="rlkit data --out"):
        read_rows(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(UsageError, match="not a readable parquet file"):
        read_rows(junk)
