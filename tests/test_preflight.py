"""`rlkit preflight --gpu` against a real local Ray head: the job runs, every check reports, and the
GPU checks (the count, and those that exercise GPUs) say plainly that there is no GPU here."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster import preflight as preflight_module
from rlkit.cluster.gpu_checks import GPU_CHECKS, Check
from rlkit.cluster.preflight import (
    MARK,
    _storage,
    format_checks,
    preflight,
    tied_embeddings,
    with_client,
)
from rlkit.cluster.preflight import config_json as _config_json
from rlkit.errors import RlkitError
from rlkit.run.remote import read_answer


@pytest.fixture(scope="module")
def cli_run(ray_cluster, tmp_path_factory) -> tuple[int, str, dict[str, Check]]:
    """One `rlkit preflight` through the CLI, so one preflight job on the head: its exit code,
    its table and the checks it computed, which the tests below share (a job costs ~40 s)."""
    root = tmp_path_factory.mktemp("fsx")
    seen: list[list[Check]] = []

    def recording(*args, **kwargs):
        seen.append(preflight(*args, **kwargs))
        return seen[-1]

    argv = ["preflight", "--gpu", "--address", ray_cluster.address, "--preset", "qwen3vl-2b-smoke"]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setattr(preflight_module, "preflight", recording)
        code = rlkit_main([*argv, "--runs-root", str(root)])
    assert len(seen) == 1, "the CLI did not run the preflight job"
    return code, out.getvalue(), {c.name: c for c in seen[0]}


@pytest.fixture(scope="module")
def checks(cli_run) -> dict[str, Check]:
    return cli_run[2]


def test_the_runtime_of_this_project_passes_its_package_checks(checks):
    for name in ("ray", "python", "skyrl", "vllm", "torch", "transformers"):
        assert checks[name].status == "ok", checks[name]
    assert checks["ray"].detail == "client 2.57.0, cluster 2.57.0"
    assert checks["skyrl"].detail == "0.4.0"


def test_no_gpu_is_said_plainly_with_its_fix(checks):
    gpus = checks["gpus"]
    assert gpus.status == "fail" and gpus.detail.startswith("no GPU in this cluster")
    assert "needs 8 GPUs" in gpus.fix  # preflight checks the default qwen3vl-8b: all 8
    assert checks["flash-attn"].status == "fail" and "deploy/Dockerfile" in checks["flash-attn"].fix


def test_gpu_exercises_are_skipped_without_a_gpu(cli_run):
    _, out, checks = cli_run
    for name in GPU_CHECKS:
        assert checks[name].status == "skip", checks[name]
        assert checks[name].detail.startswith("skipped: no GPU in this cluster")
        assert f"skip  {name}" in out


def test_skyrl_traps_are_refused_before_a_job_starts(capsys):
    # no head at this address: the refusal comes first, in one line
    argv = ["preflight", "--address", "http://127.0.0.1:9", "--model", "Qwen/Qwen3-VL-8B-Thinking"]
    assert rlkit_main(argv) == 2
    err = capsys.readouterr().err
    assert "thinking model" in err and len(err.strip().splitlines()) == 1


def test_storage_and_model_checks(checks, tmp_path: Path):
    storage = checks["storage"]  # ok exactly when the runs root has the room the run needs
    free, need = (float(x) for x in re.findall(r"(\d+) GB", storage.detail))
    assert storage.status == ("ok" if free >= need else "fail"), storage.detail
    assert checks["model"].status == "warn"
    assert "rlkit model stage Qwen/Qwen3-VL-2B-Instruct --to /fsx/models/" in checks["model"].fix
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert _storage(str(blocked / "runs"), 1).status == "fail"
    assert _storage(str(tmp_path), 1e9).fix.startswith("free space")


def test_table_and_exit_code(cli_run):
    code, out, checks = cli_run
    assert code == 1  # no GPU here
    assert "fail  gpus" in out and "fix   gpus:" in out and out.rstrip().endswith("failed")
    assert out.strip() == format_checks(list(checks.values()))


def parse_report(logs: str) -> list[Check]:
    """The checks a preflight job printed, read as `preflight` reads its answer."""
    return [Check(**c) for c in read_answer(logs, MARK, "the preflight job printed no report")]


def test_report_parsing_and_ray_mismatch():
    report = with_client(
        parse_report(
            'RLKIT_PREFLIGHT [{"name": "ray", "status": "ok", "detail": "2.56.0", "fix": ""}]'
        ),
        "2.57.0",
    )
    assert report[0].status == "fail" and "ray[default]==2.56.0" in report[0].fix
    assert format_checks(report).endswith("1 check(s) failed")
    with pytest.raises(RlkitError, match="printed no report"):
        parse_report("Traceback ...\nImportError: no rlkit")


def test_tied_embeddings_are_read_from_the_models_config(tmp_path: Path):
    from rlkit.model.build import build_tiny
    from rlkit.model.config import TinyConfig

    tied = build_tiny(tmp_path / "tied")  # tied at the top level, as Qwen3-VL-2B's config.json
    assert _config_json(str(tied)) == tied / "config.json"
    check = tied_embeddings(json.loads((tied / "config.json").read_text()))
    assert check == Check("tie_word_embeddings", "ok", "tied (re-tied after FSDP init by rlkit)")
    untied = build_tiny(tmp_path / "untied", config=TinyConfig(tie_word_embeddings=False))
    assert tied_embeddings(json.loads((untied / "config.json").read_text())).detail == "untied"
    only_text = tied_embeddings({"text_config": {"tie_word_embeddings": True}})
    assert only_text.status == "warn" and "lm_head.weight" in only_text.fix
    assert _config_json(str(tmp_path / "absent")) is None
    assert _config_json("rlkit-tests/not-a-cached-model") is None
    assert "tie_word_embeddings" in format_checks([check])


def test_the_token_budget_is_reported(checks):
    # the 2B is not on this node: the budget comes from Qwen3-VL's assumed values, as at the
    # dry run, on the presets' default set (the seed's visgym-easy); 1024-token answers pass
    # 8192 tokens at turn 7 of 18 (a warning, not a failure)
    budget = checks["token budget"]
    assert budget.status == "warn" and "at turn 7" in budget.fix, budget
    image = checks["image tokens"].detail
    assert image.startswith("visgym-easy 225x225 -> 256x256 by the processor, 64 tokens"), image
    assert (
        checks["chat template"].status == "skip"
        and "not on this node" in checks["chat template"].detail
    )


def test_the_model_check_points_at_the_staged_copy(tmp_path: Path):
    from rlkit.cluster.preflight import model_check
    from rlkit.cluster.stage import STAGED_MARKER

    hub_id = "Org/Tiny-VL"
    assert "rlkit model stage Org/Tiny-VL" in model_check(hub_id, str(tmp_path)).fix
    staged = tmp_path / "Tiny-VL"
    staged.mkdir()
    (staged / "config.json").write_text("{}")
    assert "not staged by rlkit" in model_check(str(staged)).detail  # copied by hand: unchecked
    (staged / STAGED_MARKER).write_text(json.dumps({"source": hub_id, "bytes": 17.5e9}))
    assert model_check(hub_id, str(tmp_path)).fix == f"pass --model {staged}"
    found = model_check(str(staged))
    assert found.status == "ok" and "staged from Org/Tiny-VL, 17.5 GB, verified" in found.detail
    assert model_check(str(tmp_path / "absent")).fix.startswith("stage it there: rlkit model stage")
