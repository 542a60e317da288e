"""rlkit's turn-by-turn prompts (rlkit.cluster.skyrl.render) against vLLM's own render.

One vLLM CPU server on the tiny Qwen3-VL, as SkyRL's actor starts it (vllm_server.py), and
SkyRL's own `RemoteInferenceClient`. An episode of rlkit's env is rendered turn by turn, each
picture sent to the server once, and every turn's prompt is checked against the server's render
of the whole conversation: the same ids, image hashes, placeholder ranges and metadata, and the
same pixel values and grids through SkyRL's `decode_mm_kwargs`. The engine then answers both
prompts alike, and rlkit's generator plays the same greedy episodes as SkyRL's own loop. About
40 s, most of it the server's start.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from PIL import Image
from skyrl.backends.renderer import decode_mm_kwargs
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInput
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.config import ChatTemplateConfig, GeneratorConfig, SamplingParams, SkyRLGymConfig
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output

from rlkit.cluster.skyrl.generator import DESYNC_METRIC, RESEND_METRIC, RlkitVLMGenerator
from rlkit.cluster.skyrl.render import TurnRenderer, image_urls
from rlkit.env.data import read_rows, write_datasets
from rlkit.env.maze_env import ENV_ID, env_for_set, make_env, maze_from_extras, register_env
from rlkit.maze.core import Action, optimal_action

try:  # tests/skyrl is a plain directory: a package named `skyrl` would shadow SkyRL itself
    from vllm_server import make_client, run
except ImportError:  # pragma: no cover
    from .vllm_server import make_client, run

pytestmark = [pytest.mark.skyrl, pytest.mark.slow]  # a vLLM server

N_TURNS = 8


def wanderer(env, turn: int) -> str:
    """An answer that keeps the episode going: unreadable on turn 1 (the env shows the same
    picture again), else a move away from the exit where there is one."""
    if turn == 1:
        return "hmm"
    maze, pos = env.state.maze, env.state.pos
    moves = [a for a in Action if maze.can_move(pos, a)]
    away = [a for a in moves if a != optimal_action(maze, pos)]
    return f"<action>{(away or moves)[turn % len(away or moves)].word}</action>"


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server  # the session's server on tiny_dir (tests/skyrl/conftest.py)


@pytest.fixture(scope="module")
def eval_path(tmp_path_factory):
    register_env()
    _, path = write_datasets(tmp_path_factory.mktemp("data"), n_train=1, eval_set="test")
    return path


@pytest.fixture(scope="module")
def rows(eval_path) -> list[dict]:
    return read_rows(eval_path)


class CountingClient:
    """SkyRL's client, counting the images its render requests carry."""

    def __init__(self, client) -> None:
        self.client = client
        self.model_name = client.model_name
        self.images = 0

    async def render_chat_completion(self, request: dict) -> dict:
        self.images += len(image_urls(request["json"]["messages"]))
        return await self.client.render_chat_completion(request)


def assert_same_render(ours_ids, ours_features, pixels, theirs: dict) -> None:
    """Our prompt equals vLLM's render of the whole conversation, tensors decoded by SkyRL."""
    features = theirs["features"]
    assert ours_ids == theirs["token_ids"]
    for key in ("mm_hashes", "mm_placeholders", "mm_metadata"):
        assert ours_features[key] == features[key], key
    ours_mm = decode_mm_kwargs(ours_features["kwargs_data"])
    theirs_mm = decode_mm_kwargs(features["kwargs_data"])
    for key in ("pixel_values", "image_grid_thw"):
        assert torch.equal(ours_mm[key], theirs_mm[key]), key
    assert torch.equal(pixels[0], theirs_mm["pixel_values"])
    assert torch.equal(pixels[1], theirs_mm["image_grid_thw"])


def test_each_turns_prompt_is_vllms_render_of_the_conversation(server, tokenizer, rows):
    """An episode of 8 answers (9 pictures, one repeated): each turn's prompt as vLLM renders
    the whole conversation, with every picture sent to the server once."""
    client = make_client(server, tokenizer=tokenizer)
    counting = CountingClient(client)
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    renderer = TurnRenderer(counting, tokenizer, image_id, decode_mm_kwargs)
    env = make_env(maze_from_extras(rows[0]), env_for_set("test"))

    async def play():
        conversation, _ = env.init()
        prompt = await renderer.start(conversation, "s0")
        turns = [(list(prompt.ids), prompt.features(), prompt.pixels(), list(conversation))]
        for turn in range(N_TURNS):
            text = wanderer(env, turn)
            step = env.step(text)
            assert not step["done"]
            conversation += [{"role": "assistant", "content": text}, *step["observations"]]
            sampled = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            obs = await renderer.extend(
                prompt, sampled, conversation, len(step["observations"]), "s0"
            )
            assert prompt.ids[-len(obs) :] == obs
            turns.append((list(prompt.ids), prompt.features(), prompt.pixels(), list(conversation)))
        renders = [
            await client.render_chat_completion({"json": {"messages": c}}) for *_, c in turns
        ]
        return turns, renders

    turns, renders = run(client, play())
    for (ids, features, pixels, _), theirs in zip(turns, renders, strict=True):
        assert_same_render(ids, features, pixels, theirs)
    urls = image_urls(turns[-1][3])
    assert len(urls) == N_TURNS + 1 and len(set(urls)) < len(urls)  # a picture repeated
    assert counting.images == len(set(urls))


def test_the_engine_answers_either_prompt_alike(server, tokenizer, rows):
    """Greedy tokens and logprobs from our features equal those from vLLM's whole render, also
    with every picture sent by hash (read from the engine's multimodal cache), and an answer
    that sampled `<|image_pad|>` (a pad no image fills) is still served."""
    client = make_client(server, tokenizer=tokenizer)
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    renderer = TurnRenderer(client, tokenizer, image_id, decode_mm_kwargs)
    env = make_env(maze_from_extras(rows[1]), env_for_set("test"))
    params = {"max_tokens": 4, "temperature": 0.0, "logprobs": 0}

    async def generate(ids, features):
        engine_input = InferenceEngineInput(
            prompt_token_ids=[ids], sampling_params=params, mm_features=[features]
        )
        out = await client.generate(engine_input, model=client.model_name)
        return out["response_ids"][0], out["response_logprobs"][0]

    async def play():
        conversation, _ = env.init()
        prompt = await renderer.start(conversation, "s1")
        for turn, stray in ((0, False), (2, True)):
            text = wanderer(env, turn)
            step = env.step(text)
            conversation += [{"role": "assistant", "content": text}, *step["observations"]]
            sampled = tokenizer.encode(text, add_special_tokens=False)
            sampled = [image_id, *sampled] if stray else sampled  # vLLM's text skips the pad
            await renderer.extend(prompt, [*sampled, tokenizer.eos_token_id], conversation, 1, "s1")
            if not stray:
                whole = await client.render_chat_completion({"json": {"messages": conversation}})
                assert whole["token_ids"] == prompt.ids
                theirs = await generate(whole["token_ids"], whole["features"])
                assert await generate(prompt.ids, prompt.features()) == theirs
                prompt.mark_sent()  # the engine holds every picture now: all by hash
                by_hash = prompt.features(skip_sent=True)
                assert all(k is None for k in by_hash["kwargs_data"]["image"])
                assert await generate(prompt.ids, by_hash) == theirs
        return await generate(prompt.ids, prompt.features())

    answer, logprobs = run(client, play())
    assert len(answer) == len(logprobs) > 0


class SentTensors:
    """SkyRL's client, counting the pictures its generate requests carry with their tensors
    and by hash alone."""

    def __init__(self, client) -> None:
        self.client = client
        self.tensors = self.by_hash = 0

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    async def generate(self, engine_input, **kw):
        for features in engine_input.get("mm_features") or []:
            items = ((features or {}).get("kwargs_data") or {}).get("image", [])
            self.tensors += sum(item is not None for item in items)
            self.by_hash += sum(item is None for item in items)
        return await self.client.generate(engine_input, **kw)


def greedy_config(tokenizer) -> tuple[GeneratorConfig, SamplingParams]:
    """SkyRL's generator config for greedy 2-token answers (a move word, then the end)."""
    words = [tokenizer.convert_tokens_to_ids(a.word) for a in Action]
    sampling = SamplingParams(
        max_generate_length=2,
        temperature=0.0,
        logprobs=1,
        additional_kwargs={"allowed_token_ids": [*words, tokenizer.eos_token_id]},
    )
    cfg = GeneratorConfig(
        sampling_params=sampling,
        max_input_length=2048,
        batched=False,
        max_turns=6,
        use_conversation_multi_turn=True,
        chat_template=ChatTemplateConfig(source="name", name_or_path=None),
        step_wise_trajectories=False,
        vision_language_generator=True,
    )
    return cfg, sampling


def distinct_pictures(pixels: torch.Tensor, grids: torch.Tensor) -> int:
    """How many different pictures a sample's patches hold (vLLM hashes a picture by its bytes:
    the same picture, the same patches)."""
    patches = torch.split(pixels, grids.prod(-1).tolist())
    return len({p.numpy().tobytes() for p in patches})


def test_rlkits_generator_plays_skyrls_greedy_episodes(server, tokenizer, eval_path):
    """SkyRL's own loop and rlkit's on the same greedy engine, 2 mazes x 2 of 6 turns: the same
    samples, pixel values and rewards, whether each turn carries every picture's tensors (as
    SkyRL's loop sends them) or only those its engine has not received yet."""
    dataset = PromptDataset([str(eval_path)], tokenizer, max_prompt_length=512, num_workers=1)
    prompts = dataset.collate_fn([dataset[i] for i in range(2)])
    cfg, sampling = greedy_config(tokenizer)
    outputs, counted = {}, {}
    for name, cls, extra in (
        ("skyrl", SkyRLVLMGymGenerator, {}),
        ("rlkit", RlkitVLMGenerator, {"merge_size": 2}),
        ("by_hash", RlkitVLMGenerator, {"merge_size": 2, "engine_keeps_images": True}),
    ):
        client = make_client(server, tokenizer=tokenizer)
        counted[name] = SentTensors(client)
        generator = cls(cfg, SkyRLGymConfig(max_env_workers=0), counted[name], tokenizer, **extra)
        batch, _ = prepare_generator_input(
            prompts, 2, get_sampling_params_for_backend("vllm", sampling), ENV_ID, "train", 0
        )
        outputs[name] = run(client, generator.generate(batch, disable_tqdm=True))
        validate_generator_output(len(batch["prompts"]), outputs[name])
    skyrl = outputs["skyrl"]
    for ours in (outputs["rlkit"], outputs["by_hash"]):
        for key in ("prompt_token_ids", "response_ids", "loss_masks", "rewards", "stop_reasons"):
            assert ours[key] == skyrl[key], key
        for key in ("pixel_values", "image_grid_thw"):
            assert all(torch.equal(a, b) for a, b in zip(ours[key], skyrl[key], strict=True)), key
        assert ours["rollout_metrics"][DESYNC_METRIC] == 0
    # each picture's tensors went to the engine once an episode; every later turn by hash
    by_hash = outputs["by_hash"]
    pictures = sum(
        distinct_pictures(p, g)
        for p, g in zip(by_hash["pixel_values"], by_hash["image_grid_thw"], strict=True)
    )
    assert counted["by_hash"].tensors == pictures
    assert counted["by_hash"].tensors + counted["by_hash"].by_hash == counted["rlkit"].tensors
    assert counted["by_hash"].by_hash > 0 and counted["rlkit"].by_hash == 0
    assert by_hash["rollout_metrics"][RESEND_METRIC] == 0


def test_a_turn_its_engine_cannot_serve_by_hash_is_sent_again_whole(server, tokenizer):
    """A picture the engine does not hold (dropped from its cache, or never received) sent by
    hash: vLLM answers HTTP 500, and the turn goes again with every picture's tensors, once;
    the answer is the one the whole prompt gets."""
    client = make_client(server, tokenizer=tokenizer)
    cfg, sampling = greedy_config(tokenizer)
    generator = RlkitVLMGenerator(
        cfg,
        SkyRLGymConfig(max_env_workers=0),
        client,
        tokenizer,
        merge_size=2,
        engine_keeps_images=True,
    )
    noise = Image.fromarray(np.random.default_rng(7).integers(0, 256, (48, 48, 3), np.uint8))
    buf = io.BytesIO()
    noise.save(buf, format="PNG")  # a picture no other test sends
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    part = {"type": "image_url", "image_url": {"url": url}}
    conversation = [{"role": "user", "content": [part, {"type": "text", "text": "Move."}]}]
    params = get_sampling_params_for_backend("vllm", sampling)

    async def play():
        episode = await generator.renderer.start(conversation, "s-miss")
        episode.sent = {episode.images[0].mm_hash}  # as if its engine had received it
        missed = await generator.engine_turn(episode, "s-miss", params, None)
        resends_after_miss = generator._resends
        again = await generator.engine_turn(episode, "s-miss", params, None)  # now it is held
        whole = await generator.renderer.start(conversation, "s-whole")
        return (
            missed,
            again,
            await generator.engine_turn(whole, "s-whole", params, None),
            resends_after_miss,
        )

    missed, again, whole, resends = run(client, play())
    assert missed["response_ids"] == whole["response_ids"] == again["response_ids"]
    assert resends == 1 and generator._resends == 1
