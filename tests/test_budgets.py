"""Token budgets before GPU-hours (rlkit.model.budgets, rlkit.model.budget_report): image tokens
by transformers' own resize rule, the arithmetic by hand, the budget of a played conversation
against what the checkpoint's processor really tokenizes, and what a real Qwen checkpoint's
files say. The dry run and preflight that print them: tests/test_budget_cli.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_resize

from rlkit.env.maze_env import MazeEnv, env_for_set
from rlkit.errors import UsageError
from rlkit.maze.core import Action
from rlkit.maze.parsing import format_action
from rlkit.maze.render import image_from_data_uri
from rlkit.maze.sets import TEST_SETS
from rlkit.model.budget_report import budget_report, set_episode
from rlkit.model.budgets import (
    QWEN3VL,
    TINY,
    Episode,
    ImageProcessor,
    Tokens,
    TurnBudget,
    image_tokens,
    preprocessor,
    smart_resize,
    turn_budget,
)
from rlkit.model.build import build_tiny

QWEN2VL = ImageProcessor(patch=14, merge=2, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
SIZES = [(h, w) for h in (5, 17, 48, 100, 192, 224, 255, 384, 1000, 4000) for w in (48, 224, 701)]
SIZES += [(16000, 300), (9999, 9999), (33, 6000)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("budgets") / "tiny")


@pytest.fixture(scope="module")
def qwen() -> Path:
    """The Qwen-vocabulary fixture checkpoint (real tokenizer, template, processor config)."""
    fixture = pytest.importorskip("rlkit.model.qwen_fixture")
    return fixture.qwen_fixture()


@pytest.mark.parametrize("proc", [QWEN3VL, TINY, QWEN2VL], ids=["qwen3vl", "tiny", "qwen2vl"])
def test_resize_is_transformers_rule(proc):
    for h, w in SIZES:
        want = hf_resize(h, w, proc.factor, proc.min_pixels, proc.max_pixels)
        assert smart_resize(h, w, proc) == want, (h, w)
    with pytest.raises(ValueError):
        hf_resize(1, 224, proc.factor, proc.min_pixels, proc.max_pixels)
    with pytest.raises(UsageError, match="aspect"):
        smart_resize(1, 224, proc)


def test_image_tokens_by_hand():
    # 224 -> 224 (7 x 32), under 65,536 px: scaled to 256 x 256 = 16 x 16 patches -> 8 x 8
    assert smart_resize(224, 224, QWEN3VL) == (256, 256)
    assert image_tokens(224, 224, QWEN3VL) == 64
    # test-large: 6 cells x 64 px = 384 = 12 x 32, kept; 24 x 24 patches -> 12 x 12 tokens
    assert image_tokens(384, 384, QWEN3VL) == 144
    # test: the 48 px ego view is upscaled to 256 px by Qwen3-VL's processor: 64 tokens
    assert smart_resize(48, 48, QWEN3VL) == (256, 256) and image_tokens(48, 48, QWEN3VL) == 64
    # the tiny model: patch 8, 48 px = 6 x 6 patches -> 3 x 3 tokens, unresized
    assert smart_resize(48, 48, TINY) == (48, 48) and image_tokens(48, 48, TINY) == 9


def test_processor_numbers_are_read_from_the_checkpoint(tiny, qwen):
    assert preprocessor(tiny) == TINY
    assert preprocessor(qwen) == QWEN3VL
    assert preprocessor(tiny / "absent") is None


def test_turn_arithmetic_by_hand():
    b = TurnBudget(
        system=100,
        observation=150,
        image=146,
        header=3,
        tail=1,
        answer=1024,
        canonical=8,
        max_turns=24,
        max_input_length=8192,
        max_model_len=60000,
    )
    assert b.per_turn() == 150 + 3 + 1024 + 1 == 1178
    assert b.history(6) == 100 + 6 * 1178 == 7168  # under 8192
    assert b.history(7) == 8346 and b.passes_at() == 7
    assert b.prompt(7) == 8346 - 1025 == 7321  # turn 7 still starts
    assert b.prompt(8) == 8499 and b.cut_before() == 8 and b.turns_that_fit() == 7
    assert b.worst_case == 100 + 24 * 1178 == 28372
    # canonical answers: 150 + 3 + 8 + 1 = 162 a turn, turn 24's prompt 100 + 24*162 - 9
    assert b.prompt(24, 8) == 3979 and b.cut_before(8) is None
    assert b.refusal() is None
    assert "at turn 7: SkyRL ends such an episode before turn 8 of 24" in b.warning()


def test_refusals_name_the_knob():
    base = dict(system=100, observation=150, image=146, header=3, tail=1, canonical=8)
    small = TurnBudget(**base, answer=6, max_turns=24, max_input_length=8192, max_model_len=9999)
    assert small.refusal().endswith("set max_generate_length >= 8")
    tight = TurnBudget(**base, answer=64, max_turns=24, max_input_length=3000, max_model_len=9999)
    # prompt(t, 8) = 100 + 162 t - 9 <= 3000 up to t = 17
    assert tight.refusal().endswith("set max_input_length >= 3979 or max_turns <= 17")
    short = TurnBudget(**base, answer=1024, max_turns=24, max_input_length=8192, max_model_len=9000)
    assert short.refusal().endswith("set max_model_len >= 9216")


def played(model_dir: Path, set_name: str, turns: int) -> tuple[list[dict], int]:
    """A conversation of `turns` canonical answers as SkyRL's loop holds it before the next turn,
    and its token count from the checkpoint's own processor (template, tokenizer, images)."""
    cfg = env_for_set(set_name)
    env = MazeEnv(cfg, {"maze": TEST_SETS[set_name].spec.maze(0)})
    conversation, _ = env.init()
    for _ in range(turns):
        answer = format_action(Action.UP)
        step = env.step(answer)
        conversation += [{"role": "assistant", "content": answer}, *step["observations"]]
    images = [
        image_from_data_uri(p["image_url"]["url"])
        for m in conversation
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]  # before rendering: the template call rewrites image_url parts in place
    proc = AutoProcessor.from_pretrained(model_dir)
    text = proc.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    ids = proc.tokenizer(text, add_special_tokens=False)["input_ids"]
    grid = proc.image_processor(images=images)["image_grid_thw"]
    merged = int(grid.prod(-1).sum()) // proc.image_processor.merge_size**2
    return conversation, len(ids) - len(images) + merged  # each pad -> its image's tokens


@pytest.mark.parametrize("which", ["tiny", "qwen"])
def test_budget_matches_the_processors_count(which, request):
    model_dir = request.getfixturevalue(which)
    set_name = "test" if which == "tiny" else "test-large"
    conversation, counted = played(model_dir, set_name, turns=3)
    first = set_episode(set_name)
    ep = Episode(first.system, first.observations[:1], first.image)  # canonical: no notes
    tokens = Tokens(model_dir)
    b = turn_budget(
        ep,
        tokens,
        preprocessor(model_dir),
        max_turns=12,
        max_input_length=8192,
        max_model_len=60000,
        max_generate_length=64,
    )
    # SkyRL's prompt before turn 4 after three canonical answers
    assert b.prompt(4, b.canonical) == counted


def test_the_real_checkpoints_files_are_reported(qwen):
    r = budget_report(
        "qwen",
        qwen,
        "test-large",
        max_turns=24,
        max_input_length=8192,
        max_model_len=60000,
        max_generate_length=None,
    )
    assert r.template == "chat_template.json"
    assert r.stops == (151645, 151643)
    assert dict(r.overridden) == {
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "repetition_penalty": 1.05,
    }
    assert r.budget.canonical == 8 and r.budget.answer == 8 + 4  # derived: canonical + room
    assert Tokens(qwen).encode("<action>up</action><|im_end|>")[-1] == 151645
    lines = "\n".join(r.lines())
    assert "chat template: chat_template.json" in lines and "151645, 151643" in lines
    assert "test-large 384x384 -> 384x384 by the processor, 144 tokens" in lines


def test_test_large_figures_on_qwens_tokenizer(qwen):
    """Issue 36: at 24 turns the history passes 8192 tokens at turn 7 with 1024-token answers,
    at turn 19 with 256-token answers; canonical answers fit all 24."""
    limits = dict(max_turns=24, max_input_length=8192, max_model_len=60000)
    for answer, turn in ((1024, 7), (256, 19)):
        r = budget_report("q", qwen, "test-large", **limits, max_generate_length=answer)
        assert r.budget.image == 146 and r.budget.passes_at() == turn
        assert r.budget.cut_before(r.budget.canonical) is None
    # the same from the assumed values (the dry run where the 8B is not on this machine)
    r = budget_report("q", None, "test-large", **limits, max_generate_length=1024)
    assert r.budget.passes_at() == 7 and r.model_dir is None


def test_the_tiny_tokenizer_writes_the_canonical_answer_in_four(tiny):
    r = budget_report(
        "tiny",
        tiny,
        "test",
        max_turns=12,
        max_input_length=1536,
        max_model_len=2048,
        max_generate_length=None,
    )
    assert r.budget.canonical == 4 and r.budget.answer == 8  # the CPU preset's 8
    assert r.stops and r.template == "chat_template.jinja" and r.overridden == ()
    assert "test 48x48 -> 48x48 by the processor, 9 tokens" in "\n".join(r.lines())


def test_visgym_easy_figures_on_qwens_tokenizer(qwen):
    """The cluster presets' set: VisGym's 225 px picture upscaled to 256 px (64 tokens), 18
    turns, the rules naming the 9x9 size, `<action>stop</action>` counted with the moves."""
    limits = dict(max_turns=18, max_input_length=8192, max_model_len=60000)
    r = budget_report("q", qwen, "visgym-easy", **limits, max_generate_length=1024)
    b = r.budget
    assert (b.image, b.canonical, b.system, b.observation) == (66, 8, 161, 125)
    assert b.passes_at() == 7 and b.cut_before(b.canonical) is None
    assert b.prompt(18, b.canonical) == 2618  # canonical answers: 18 turns in a third of 8192
    assert "visgym-easy 225x225 -> 256x256 by the processor, 64 tokens" in "\n".join(r.lines())
    assert Tokens(qwen).answer_tokens(stop=True) == 8  # `stop` is one token, as `up` is
