"""The HF engine on a checkpoint with Qwen3-VL's real text side (`qwen_ckpt`: Qwen's vocabulary,
Instruct template in chat_template.json, image processor, generation_config.json with sampling
defaults; tiny random weights). Each test here failed on the code before its fix."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from rlkit.cli.main import main as rlkit_main
from rlkit.env.maze_env import EnvConfig, make_env
from rlkit.episodes.rollout import episode_rngs, history_window
from rlkit.errors import UsageError
from rlkit.maze.rules import initial
from rlkit.maze.sets import pinned_set
from rlkit.model import checkpoint_files
from rlkit.model.action_tag import answer_length, check_answer_budget
from rlkit.model.batching import banned_ids, build_batch
from rlkit.model.chat import ChatEncoder, TemplateWarning
from rlkit.model.load import load
from rlkit.model.policy import ModelPolicy, _RowSampler

SHORT = EnvConfig(max_turns=3)
IM_END, ENDOFTEXT = 151645, 151643


@pytest.fixture(scope="module")
def loaded(qwen_ckpt):
    return load(qwen_ckpt)


@pytest.fixture(scope="module")
def messages():
    maze = pinned_set()[0]
    return history_window(make_env(maze, SHORT).init()[0], 1)


def _logit_hook(loaded, rows, value):
    """Make the model's logits for `rows` equal `value` (a forward hook on the output layer)."""
    idx = torch.tensor(list(rows))

    def hook(module, inputs, out):
        return out.index_fill(-1, idx, value)

    return loaded.model.get_output_embeddings().register_forward_hook(hook)


def test_the_prompt_is_rendered_with_the_processors_template(loaded, messages):
    # Qwen keeps the template in chat_template.json: the tokenizer has none of its own
    assert loaded.tokenizer.chat_template is None
    assert checkpoint_files.template_source(loaded.path) == "chat_template.json"
    text, images = loaded.encoder.chat_text(messages)
    assert text.count("<|vision_start|><|image_pad|><|vision_end|>") == len(images) == 1
    # Qwen's Instruct template adds no default system turn
    assert text.startswith("<|im_start|>user\n<|vision_start|>")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_two_different_templates_are_named_in_one_warning(loaded, tmp_path):
    ckpt = tmp_path / "two"
    shutil.copytree(loaded.path, ckpt)
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m['role'] }}{% endfor %}"
    (ckpt / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.warns(TemplateWarning, match="different chat templates") as caught:
        other = load(ckpt)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    # rendered with the processor's template, as vLLM renders it
    assert other.encoder.template == loaded.encoder.template
    (ckpt / "chat_template.json").unlink()
    cfg.pop("chat_template")
    (ckpt / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="no chat template"):
        load(ckpt)


def test_the_fast_patch_path_matches_the_checkpoints_own_processor(loaded, messages):
    # the processor Qwen names is the torchvision ("Fast") backend: the fast path's patches
    # agree within float32 rounding, the ids exactly
    fast = loaded.encoder.encode(messages)
    slow = ChatEncoder(loaded.processor, fast=False).encode(messages)
    assert fast.prompt_ids == slow.prompt_ids
    np.testing.assert_array_equal(fast.image_grid_thw, slow.image_grid_thw)
    np.testing.assert_allclose(fast.pixel_values, slow.pixel_values, rtol=0, atol=1e-6)


def test_free_sampling_draws_from_exactly_what_rlkit_records(loaded, messages):
    # the checkpoint asks for repetition_penalty, top_k, top_p and temperature of its own
    defaults = checkpoint_files.sampling_defaults(loaded.path)
    assert {"repetition_penalty", "top_k", "top_p", "temperature"} <= set(defaults)
    seen = []
    original = _RowSampler.__call__

    def spy(self, input_ids, scores):
        seen.append(scores.clone())
        return original(self, input_ids, scores)

    pol = ModelPolicy(loaded, constrained=False, max_new_tokens=6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_RowSampler, "__call__", spy)
        pol.act([initial(pinned_set()[0])], [messages], episode_rngs(0, 1))
    batch = build_batch(loaded, [loaded.encoder.encode(messages)])
    with torch.no_grad():
        raw = loaded.model(**batch.model_inputs()).logits[:, -1].float()
    # the scores the sampler saw at the first answer token are the model's own logits (no
    # repetition penalty, top-k or temperature of the checkpoint's in between)
    torch.testing.assert_close(seen[0].float(), raw, rtol=0, atol=1e-5)


def test_rows_with_no_token_are_never_sampled(loaded, messages):
    rows = loaded.tokenless_ids
    assert (rows.start, rows.stop) == (len(loaded.tokenizer), 151_936) and len(rows) > 0
    assert set(rows) <= set(banned_ids(loaded))
    handle = _logit_hook(loaded, rows, 50.0)  # padding rows would win every draw
    try:
        pol = ModelPolicy(loaded, constrained=False, max_new_tokens=4, temperature=1.0)
        state = initial(pinned_set()[0])
        out = pol.act([state] * 4, [messages] * 4, episode_rngs(1, 4))
    finally:
        handle.remove()
    for r in out:
        assert r.response_ids and max(r.response_ids) < rows.start
        assert all(np.isfinite(r.logprobs))


def test_answers_stop_at_every_stop_id_of_the_generation_config(loaded, messages):
    assert loaded.stop_ids == (IM_END, ENDOFTEXT)
    handle = _logit_hook(loaded, [ENDOFTEXT], 50.0)
    try:
        pol = ModelPolicy(loaded, constrained=False, max_new_tokens=6, greedy=True)
        (r,) = pol.act([initial(pinned_set()[0])], [messages], episode_rngs(2, 1))
    finally:
        handle.remove()
    assert r.response_ids == [ENDOFTEXT] and r.text == ""


def test_free_move_odds_are_read_after_text_before_the_tag(loaded):
    tok = loaded.tokenizer
    head = tok.encode("I go <action>", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(head)[-3] == "Ġ<"  # ' <' is one token in Qwen's vocabulary
    pol = ModelPolicy(loaded, constrained=False)
    logits = torch.zeros(len(head) + 2, len(tok))
    up = tok.encode("up", add_special_tokens=False)[0]
    logits[len(head), up] = 5.0
    ids = [*head, up, *tok.encode("</action>", add_special_tokens=False)]
    probs = pol._free_move_probs(ids, logits)
    assert probs is not None and probs[0] == max(probs)


def test_answer_budgets_come_from_the_tokenizer(loaded):
    assert answer_length(loaded.tokenizer) == 8  # <, action, >, up, </, action, >, <|im_end|>
    check_answer_budget(loaded.tokenizer, 8, "max_generate_length")
    with pytest.raises(
        UsageError, match=r"max_generate_length \(4\) .* set max_generate_length >= 8"
    ):
        check_answer_budget(loaded.tokenizer, 4, "max_generate_length")


@pytest.mark.slow
@pytest.mark.parametrize("free", [False, True], ids=["constrained", "free"])
def test_rlkit_eval_runs_on_the_real_checkpoint(qwen_ckpt, capsys, free):
    argv = ["eval", "--policy", str(qwen_ckpt), "--json", "--greedy"]
    argv += ["--set", "test", "--mazes", "2"]
    argv += ["--free", "--max-new-tokens", "8"] if free else []
    with warnings.catch_warnings():
        warnings.simplefilter("error", TemplateWarning)
        assert rlkit_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_mazes"] == 2 and 0.0 <= out["solve_rate"] <= 1.0
