"""Tiny Qwen3-VL build/load round trip, tokenizer, and the one formatting path vs the HF processor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlkit.env.maze_env import EnvConfig, make_env
from rlkit.errors import UsageError
from rlkit.maze.render import image_from_data_uri
from rlkit.maze.sets import pinned_set
from rlkit.model.build import build_tiny
from rlkit.model.chat import ChatEncoder
from rlkit.model.load import check_checkpoint, load


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="module")
def loaded(tiny):
    return load(tiny)


def _conversation(cfg: EnvConfig | None = None) -> list[dict]:
    """Two observations (one after a parse error): two images, feedback text."""
    env = make_env(pinned_set()[3], cfg or EnvConfig())
    msgs, _ = env.init()
    out = env.step("no idea")
    return [*msgs, {"role": "assistant", "content": "no idea"}, *out["observations"]]


def test_build_save_load_round_trip(tiny, loaded):
    names = {p.name for p in tiny.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "preprocessor_config.json",
    } <= names
    assert json.loads((tiny / "config.json").read_text())["model_type"] == "qwen3_vl"
    n_params = sum(p.numel() for p in loaded.model.parameters())
    assert 100_000 < n_params < 5_000_000
    assert loaded.model.config.vision_config.patch_size == 8
    again = load(tiny)
    for (k, a), (_, b) in zip(
        loaded.model.state_dict().items(), again.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k


def test_build_leaves_the_callers_torch_rng_alone(tmp_path):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    build_tiny(tmp_path / "m", seed=0)
    assert torch.equal(torch.get_rng_state(), state)


def test_build_is_seeded(tiny, tmp_path, loaded):
    other = load(build_tiny(tmp_path / "s1", seed=1))
    same = load(build_tiny(tmp_path / "s0", seed=0))
    assert (tmp_path / "s0" / "tokenizer.json").read_text() == (tiny / "tokenizer.json").read_text()
    w = "model.language_model.layers.0.mlp.up_proj.weight"
    assert torch.equal(loaded.model.state_dict()[w], same.model.state_dict()[w])
    assert not torch.equal(loaded.model.state_dict()[w], other.model.state_dict()[w])


def test_answer_is_four_tokens(loaded):
    tok = loaded.tokenizer
    for word in ("up", "down", "left", "right"):
        ids = tok(f"<action>{word}</action><|im_end|>")["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == ["<action>", word, "</action>", "<|im_end|>"]
    assert loaded.eos_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_chat_template_renders_env_images(loaded):
    text, images = loaded.encoder.chat_text(_conversation())
    assert len(images) == 2 and all(isinstance(u, str) for u in images)
    assert text.count("<|vision_start|><|image_pad|><|vision_end|>") == 2
    assert text.startswith("<|im_start|>user\n<|vision_start|>")
    assert text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nno idea<|im_end|>" in text


@pytest.mark.parametrize(
    "cfg",
    [EnvConfig(), EnvConfig.from_mapping({"view": "full", "cell_px": 10})],
    ids=["ego-no-resize", "full-resized"],
)
def test_fast_path_equals_hf_processor(loaded, cfg):
    msgs = _conversation(cfg)
    fast = loaded.encoder.encode(msgs)
    hf = ChatEncoder(loaded.processor, fast=False).encode(msgs)
    assert fast.prompt_ids == hf.prompt_ids
    assert np.array_equal(fast.image_grid_thw, hf.image_grid_thw)
    assert fast.pixel_values.dtype == hf.pixel_values.dtype == np.float32
    assert np.array_equal(fast.pixel_values, hf.pixel_values)  # bit-exact, not just close
    n_pad = fast.prompt_ids.count(loaded.model.config.image_token_id)
    assert n_pad == int(fast.image_grid_thw.prod(1).sum()) // 4


def test_image_parts_as_pil_or_array_encode_the_same(loaded):
    msgs = _conversation()
    uri = msgs[0]["content"][0]["image_url"]["url"]
    pil = image_from_data_uri(uri)
    for image in (pil, np.asarray(pil)):
        swapped = [*msgs]
        swapped[0] = {
            "role": "user",
            "content": [{"type": "image", "image": image}, msgs[0]["content"][1]],
        }
        a, b = loaded.encoder.encode(swapped), loaded.encoder.encode(msgs)
        assert a.prompt_ids == b.prompt_ids
        assert np.array_equal(a.pixel_values, b.pixel_values)


def test_not_a_checkpoint_is_one_line_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no config.json"):
        check_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UsageError, match="'llama'") as e:
        load(tmp_path)
    assert "\n" not in str(e.value)
