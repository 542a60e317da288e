"""A SkyRL run from an SFT checkpoint (issue 51, items 4 and 6): a staged HF dir as policy and
reference, VisGym's tuple answers with its 0.8 task + 0.2 format reward, and a prompt file, all
through the preset's settings; SkyRL's own generator plays the rows with a scripted engine in
the real-Qwen fixture's tokenizer and template."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import test_generator as tg  # its play/replay helpers: the same SkyRL path
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from transformers import AutoProcessor

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.entry import ensure_datasets, parse_args, record_run
from rlkit.cluster.skyrl.generator import RlkitVLMGenerator
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.preset_sections import task_view
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.cluster.stage import STAGED_MARKER
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.parsing import format_tuple
from rlkit.model.chat import ChatEncoder
from rlkit.model.load import processor_template
from rlkit.run import open_run

PROMPT = "You are navigating a 9x9 maze. Answer ('move', 0) to go right, ('stop', 'stop') to stop."
TAGGED = "<observation>maze</observation><justification>closer</justification><action>{}</action>"
SFT = {"answer_format": "visgym-sft", "format_weight": 0.2}


@pytest.fixture(scope="module")
def qwen_encoder(start) -> ChatEncoder:
    """The staged start model's own processor: Qwen's tokenizer and chat template, the tokenizer
    given the processor's template as `RlkitExp` gives it (SkyRL's dataset renders with it)."""
    encoder = ChatEncoder(AutoProcessor.from_pretrained(start[0]))
    encoder.tokenizer.chat_template = processor_template(start[0])
    return encoder


@pytest.fixture(scope="module")
def start(tmp_path_factory, qwen_ckpt):
    """A staged copy of the real-Qwen fixture and a prompt file, as a researcher has them on /fsx."""
    root = tmp_path_factory.mktemp("fsx")
    model = root / "models" / "sft"
    shutil.copytree(qwen_ckpt, model)
    (model / STAGED_MARKER).write_text("{}")
    (root / "prompt.txt").write_text(PROMPT)
    return model, root / "prompt.txt"


def test_the_staged_dir_is_policy_and_reference(start):
    model, prompt = start
    sky = get_preset("qwen3vl-8b", model_path=str(model), prompt_file=str(prompt), **SFT)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(sky, "r"))
    assert cfg.trainer.policy.model.path == cfg.trainer.ref.model.path == str(model)
    env = task_view(sky.task)
    assert (env.parser, env.prompt_style, env.format_weight, env.rules) == (
        "visgym-sft",
        "visgym-sft",
        0.2,
        PROMPT,
    )
    assert task_view(get_preset("qwen3vl-8b").task).parser == "visgym"  # the default stays


def test_the_dry_run_says_where_the_run_starts(start, capsys, tmp_path):
    model, prompt = start
    sets = [f"--set={k}={v}" for k, v in {**SFT, "prompt_file": prompt}.items()]
    argv = ["submit", "--preset", "qwen3vl-8b", "--model", str(model), *sets]
    assert rlkit_main([*argv, "--runs-root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    sha = hashlib.sha256(PROMPT.encode()).hexdigest()[:12]
    line = next(x for x in out.splitlines() if x.startswith("start:"))
    assert line.split(":", 1)[1].strip() == (
        f"{model} as policy and reference (staged and checked by rlkit model stage); answers "
        "VisGym's ('move', D) with D 0=right 1=up 2=left 3=down, ('stop', 'stop'); reward "
        f"0.8 x verdict + 0.2 x format; rules {prompt} (sha256 {sha})"
    )
    assert f"trainer.ref.model.path={model}" in out


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("answer_format=tuple", "answer_format 'tuple': use visgym or visgym-sft"),
        ("format_weight=1.5", r"format_weight \(1.5\) must be in \[0, 1\]"),
        ("prompt_file=/nonexistent/prompt.txt", "prompt_file '/nonexistent/prompt.txt' cannot"),
        ("eval_set=test-large", None),  # cells with the defaults: accepted
    ],
)
def test_bad_values_are_refused_in_one_line(setting, message):
    key, value = setting.split("=")
    if message is None:
        assert task_view(get_preset("qwen3vl-8b", **{key: value}).task).parser == "relaxed"
        return
    with pytest.raises(UsageError, match=message):
        get_preset("qwen3vl-8b", **{key: value})


def test_a_start_dir_that_is_no_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="has no config.json: give an HF model dir"):
        get_preset("qwen3vl-8b", model_path=str(tmp_path / "empty"))


@pytest.mark.parametrize(
    ("tagged", "reward", "generator"),
    [
        (True, 1.0, SkyRLVLMGymGenerator),
        (False, 0.8, SkyRLVLMGymGenerator),
        (True, 1.0, RlkitVLMGenerator),
    ],
)
def test_skyrls_generator_plays_tuples_and_pays_the_format(
    start, qwen_encoder, tmp_path, tagged, reward, generator
):
    _, prompt = start
    sky = get_preset("qwen3vl-8b", prompt_file=str(prompt), **SFT)
    _, evals = ensure_datasets(str(tmp_path), 4, "visgym-easy", 64, None, None, task_view(sky.task))
    ds = PromptDataset([str(evals)], qwen_encoder.tokenizer, 4096, num_workers=1)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(sky, "v"))

    def player(maze, state, rep):
        answer = format_tuple(rules.best_move(state))
        return TAGGED.format(answer) if tagged else f"Going there. {answer}"

    batch, out, engine = tg.play(
        cfg, ds, qwen_encoder, player, mazes=range(1), samples=1, generator_cls=generator
    )
    for i in range(len(batch["prompts"])):
        s = engine.sessions[tg.session_of(batch, i)]
        env = tg.replay(batch["env_extras"][i], s.texts)
        assert rules.solved(env.state) and env.state.parse_errors == 0
        assert sum(out["rewards"][i]) == pytest.approx(reward)
        assert s.texts[-1].count("('stop', 'stop')") == 1
    assert batch["prompts"][0][0] == {"role": "system", "content": PROMPT}


def test_run_json_records_the_prompt_files_hash(start, tmp_path):
    _, prompt = start
    sky = get_preset("skyrl-tiny-cpu", eval_set="visgym-easy", prompt_file=str(prompt))
    argv = ["--preset", "skyrl-tiny-cpu", "--config", sky.to_json()]
    args, overrides = parse_args([*argv, "--", f"trainer.ckpt_path={tmp_path / 'run'}"])
    record_run(SkyRLTrainConfig.from_cli_overrides(overrides), args, overrides)
    config = open_run(tmp_path / "run").config()
    assert config["entry"]["task"]["prompt_file"] == str(prompt)
    assert config["prompt_sha256"] == hashlib.sha256(PROMPT.encode()).hexdigest()
    assert json.dumps(config)  # run.json stays plain JSON
