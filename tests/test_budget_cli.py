"""The token budget where a run starts: `rlkit submit --dry-run` prints it, the dry run, a real
submit (no head is reached: a closed port) and `--rayjob` refuse a turn budget that cannot fit in
one line naming the knob, and the preflight job's budget checks read the checkpoint's files
(the preflight job itself: tests/test_preflight.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.preflight import BUDGET_FIELDS, _budget
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset

MODES = [["--dry-run"], ["--address", "http://127.0.0.1:9"], ["--rayjob", "never.yaml"]]
TOO_SMALL = [
    (["--set", "max_input_length=2500"], "set max_input_length >= "),
    (["--set", "max_turns=60"], "or max_turns <= "),
    (["--set", "max_generate_length=7"], "set max_generate_length >= 8"),
    (["--set", "max_model_len=9000"], "set max_model_len >= 9216"),
]


@pytest.fixture(scope="module")
def qwen() -> Path:
    fixture = pytest.importorskip("rlkit.model.qwen_fixture")
    return fixture.qwen_fixture()


def dry_run(capsys, *argv: str) -> str:
    assert rlkit_main(["submit", *argv, "--dry-run"]) == 0
    return capsys.readouterr().out


def test_the_8b_dry_run_prints_its_budget_from_assumed_values(capsys, tmp_path, monkeypatch):
    """On the seed's task by default (VisGym's 225 px picture upscaled by the processor, 18
    turns, 19 images); rlkit's test-large one --set away, with its own 24 turns."""
    monkeypatch.chdir(tmp_path)
    out = dry_run(capsys, "--preset", "qwen3vl-8b-6gpu")
    assert "Qwen/Qwen3-VL-8B-Instruct: not on this machine, budget from the preset and " in out
    assert "patch 16, merge 2, min 65,536 px, max 16,777,216 px" in out
    assert "visgym-easy 225x225 -> 256x256 by the processor, 64 tokens (+2" in out
    assert "observation 136 (image 66)" in out and "system 221 + 18 turns" in out
    assert "pass max_input_length 8192 at turn 7" in out and "before turn 8 of 18" in out
    assert "limit_mm_per_prompt.image=19" in out and "generator.max_turns=18" in out
    assert "read from the checkpoint by `rlkit preflight`" in out
    out = dry_run(capsys, "--preset", "qwen3vl-8b-6gpu", "--set", "eval_set=test-large")
    assert "test-large 384x384 -> 384x384 by the processor, 144 tokens (+2" in out
    assert "limit_mm_per_prompt.image=25" in out and "generator.max_turns=24" in out


def test_the_cpu_preset_derives_its_answer_budget_from_the_tokenizer(capsys, tmp_path, qwen):
    out = dry_run(capsys, "--preset", "skyrl-tiny-cpu", "--runs-root", str(tmp_path))
    assert "generator.sampling_params.max_generate_length=8" in out  # tiny: 4 + 4
    assert "answer <= 8 (max_generate_length; canonical 4)" in out
    out = dry_run(
        capsys, "--preset", "skyrl-tiny-cpu", "--runs-root", str(tmp_path), "--model", str(qwen)
    )
    assert "generator.sampling_params.max_generate_length=12" in out  # Qwen's 8 + 4
    assert "chat template: chat_template.json" in out and "stop ids:      151645, 151643" in out
    assert "temperature 0.7, top_k 20, top_p 0.8, repetition_penalty 1.05" in out
    assert "test 48x48 -> 256x256 by the processor, 64 tokens" in out  # upscaled: min 65,536 px
    preset = get_preset("skyrl-tiny-cpu", model_path=str(qwen))
    assert "generator.eval_sampling_params.max_generate_length=12" in build_overrides(preset, "r")


@pytest.mark.parametrize("mode", MODES, ids=["dry-run", "submit", "rayjob"])
@pytest.mark.parametrize(("change", "says"), TOO_SMALL)
def test_a_budget_that_cannot_fit_is_refused_in_one_line(
    capsys, tmp_path, monkeypatch, mode, change, says
):
    monkeypatch.chdir(tmp_path)
    assert rlkit_main(["submit", "--preset", "qwen3vl-8b", *change, *mode]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never.yaml").exists()


def test_preflight_reads_the_budget_from_the_checkpoint(qwen):
    fields = {k: getattr(get_preset("qwen3vl-8b-6gpu").task, k) for k in BUDGET_FIELDS}
    checks = {c.name: c for c in _budget(str(qwen), fields)}
    assert checks["chat template"].detail == "chat_template.json"
    assert checks["stop ids"].detail == "151645, 151643"
    assert "top_k 20" in checks["generation defaults"].detail
    assert checks["image tokens"].detail.endswith("64 tokens (+2 vision start/end)")
    assert checks["token budget"].status == "warn" and "at turn 7" in checks["token budget"].fix
    tight = {c.name: c for c in _budget(str(qwen), {**fields, "max_input_length": 2500})}
    assert tight["token budget"].status == "fail"
    assert "set max_input_length >= " in tight["token budget"].fix
    absent = {c.name: c for c in _budget("Qwen/Not-Cached-Here", fields)}
    assert (
        absent["chat template"].status == "skip"
        and "not on this node" in absent["chat template"].detail
    )
