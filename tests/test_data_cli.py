import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlkit.cli.main import main
from rlkit.env.data import read_rows, write_datasets
from rlkit.env.maze_env import MazeEnv
from rlkit.errors import UsageError
from rlkit.maze.sets import pinned_set


def test_datasets_in_skyrl_row_format(tmp_path):
    train, evals = write_datasets(tmp_path, 32)
    rows = read_rows(train)
    assert len(rows) == 32 and len(read_rows(evals)) == 64
    row = rows[0]
    assert row["env_class"] == "rlkit-maze" and row["prompt"][-1]["role"] == "user"
    assert row["reward_spec"]["method"] == "rule"
    env = MazeEnv({}, {k: v for k, v in row.items() if k != "prompt"})
    msgs, _ = env.init(row["prompt"])
    assert msgs[-1]["role"] == "user"
    eval_hashes = [json.loads(r["extra_info"]["maze"])["hash"] for r in read_rows(evals)]
    assert eval_hashes == [m.content_hash for m in pinned_set()]
    train_hashes = {json.loads(r["extra_info"]["maze"])["hash"] for r in rows}
    assert not train_hashes & set(eval_hashes)
    assert json.loads((tmp_path / "manifest.json").read_text())["eval_rows"] == 64


def test_bad_dataset_rows_fail_clearly(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "x"}]), path)
    with pytest.raises(UsageError, match="lacks columns"):
        read_rows(path)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(UsageError, match="not a readable parquet"):
        read_rows(tmp_path / "junk.parquet")
    with pytest.raises(UsageError, match="rlkit data"):
        read_rows(tmp_path / "missing.parquet")


def test_cli_eval_oracle_json(capsys):
    assert main(["eval", "--policy", "oracle", "--set", "test", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["solve_rate"] == 1.0 and d["n_mazes"] == 64 and d["policy"] == "oracle"
    assert len(d["ci95"]) == 2 and d["test_set_hash"]


def test_cli_maze_data_and_errors(tmp_path, capsys):
    assert main(["maze", "--size", "4", "--seed", "2", "--png", str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").stat().st_size > 0
    assert main(["data", "--out", str(tmp_path / "d"), "--train", "8"]) == 0
    capsys.readouterr()
    assert main(["maze", "--size", "40"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be an integer in [2, 16]" in err
    assert main(["eval", "--policy", "eps-oracle:x"]) == 2
    assert main(["eval", "--policy", "oracle", "--samples", "0"]) == 2
    assert main(["data", "--out", str(tmp_path / "e"), "--train", "0"]) == 2


def test_console_script_usage_error_exit_code():
    r = subprocess.run(
        [sys.executable, "-m", "rlkit.cli.main", "eval"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "--policy" in r.stderr
