"""`rlkit model stage`: a model staged once on shared storage, with resume, progress and checks.

No hub is reachable here, so a local directory stands in for it (the source is pluggable: a hub
id goes through huggingface_hub's snapshot_download, a directory through the same resume,
progress and verification). One stage runs through the real Ray Jobs API on the suite's head.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.stage import (
    STAGED_MARKER,
    main,
    parse_source,
    safetensors_problem,
    stage,
    staged_path,
    staged_record,
)
from rlkit.errors import UsageError


def safetensors(path: Path, n: int) -> None:
    """A valid safetensors file: one bf16 tensor of n values (header, then its bytes)."""
    header = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(2 * n))


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A checkpoint in the hub's sharded layout: config, index, two shards."""
    src = tmp_path / "hub" / "Tiny-VL"
    src.mkdir(parents=True)
    (src / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    for i, n in enumerate((1000, 3000), 1):
        safetensors(src / f"model-0000{i}-of-00002.safetensors", n)
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return src


def test_sources_and_default_destination():
    assert parse_source("Qwen/Qwen3-VL-8B-Instruct") == ("hub", "Qwen/Qwen3-VL-8B-Instruct")
    assert parse_source("file:///fsx/x") == parse_source("/fsx/x") == ("dir", "/fsx/x")
    assert staged_path("Qwen/Qwen3-VL-8B-Instruct") == "/fsx/models/Qwen3-VL-8B-Instruct"
    with pytest.raises(UsageError, match="hub id"):
        parse_source("s3://bucket/model")


def test_stage_verifies_resumes_and_catches_a_cut_copy(model_dir, tmp_path, capsys):
    dest = tmp_path / "fsx" / "models" / "Tiny-VL"
    first = stage(str(model_dir), str(dest))
    assert first["problems"] == [] and first["files"] == 4
    assert staged_record(dest)["bytes"] == first["bytes"]
    shard = dest / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])  # an interrupted copy
    assert "its header says" in safetensors_problem(shard)
    capsys.readouterr()
    again = stage(f"file://{model_dir}", str(dest))  # resumes: only the cut file is copied
    out = capsys.readouterr().out
    assert again["problems"] == [] and out.count("already here") == 3
    (model_dir / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 4)  # a broken source
    assert main(["--source", str(model_dir), "--to", str(dest)]) == 1
    assert staged_record(dest) is None  # not staged until verified again
    report = json.loads(capsys.readouterr().out.splitlines()[-1].split(" ", 1)[1])
    assert any("no header" in p for p in report["problems"])


def test_stage_runs_as_a_ray_job_through_the_cli(ray_cluster, model_dir, tmp_path, capsys):
    dest = tmp_path / "fsx-models" / "Tiny-VL"
    argv = ["model", "stage", f"file://{model_dir}", "--to", str(dest)]
    assert rlkit_main([*argv, "--address", ray_cluster.address]) == 0
    out = capsys.readouterr().out
    assert "rlkit: stage: config.json" in out  # the job's progress, echoed as it came
    assert f"staged file://{model_dir} at {dest}: 4 files" in out and f"--model {dest}" in out
    assert (dest / STAGED_MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        rlkit_main(
            ["model", "stage", str(empty), "--to", str(dest), "--address", ray_cluster.address]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "holds no config.json" in err and err.count("\n") == 1
