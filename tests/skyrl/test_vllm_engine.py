"""SkyRL's own inference client and VLM generator driving a real vLLM server, checked against rlkit.

One vLLM OpenAI-compatible server (CPU, float32, the tiny Qwen3-VL from
`rlkit.model.build.build_tiny`; the session's `tiny_server`, shared with
test_skyrl_render.py).
SkyRL 0.4.0's `RemoteInferenceClient` feeds `SkyRLVLMGymGenerator`, which plays rlkit-maze
episodes from rlkit's pinned `test` rows read by SkyRL's `PromptDataset`. Every answer is
replayed through rlkit's env and encoder: rewards, prompt ids, image placeholders and pixel
values must agree, and vLLM's rollout logprobs must agree with rlkit's training forward. Nothing of vLLM or SkyRL is mocked. About a minute (the server starts in ~30 s):

    .venv/bin/python -m pytest -q -p no:cacheprovider tests/skyrl/test_vllm_engine.py -s
"""

from __future__ import annotations

import inspect
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace

import aiohttp
import numpy as np
import pytest
import torch
from fastapi.params import Query
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
    RemoteInferenceClient,
)
from skyrl.train.config import ChatTemplateConfig, GeneratorConfig, SamplingParams, SkyRLGymConfig
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output
from vllm.entrypoints.serve.dev.cache import api_router as vllm_cache_routes

from rlkit.env.data import write_datasets
from rlkit.env.maze_env import ENV_ID, env_for_set, make_env, maze_from_extras, register_env
from rlkit.maze.core import Action
from rlkit.model.batching import VISION_TOKENS, build_batch, response_logprobs
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel, load

try:  # tests/skyrl is a plain directory: a package named `skyrl` would shadow SkyRL itself
    from vllm_server import SERVER_ARGS, make_client, run
except ImportError:  # pragma: no cover
    from .vllm_server import SERVER_ARGS, make_client, run

pytestmark = [pytest.mark.skyrl, pytest.mark.slow]  # a vLLM server

EVAL_SET = "test"
N_MAZES, N_SAMPLES = 8, 2
"""8 pinned test mazes x 2 episodes each (a GRPO group)."""
MAX_TURNS = env_for_set(EVAL_SET).max_turns
SEED = 1234
LOGPROB_TOL = 1e-4
"""float32 on both sides; measured max |vLLM - rlkit| ~1e-6, the rest is margin."""


@dataclass
class Rollout:
    generator_input: dict
    output: dict
    seconds: float


@dataclass
class Replay:
    """One trajectory replayed through rlkit's env, with the conversation of every turn."""

    texts: list[str]
    segments: list[tuple[int, int]]
    """(start, end) in `response_ids` of each turn's generated tokens."""
    conversations: list[list[dict]]
    reward: float
    metrics: dict
    done: bool


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server  # the session's server on tiny_dir (tests/skyrl/conftest.py)


@pytest.fixture(scope="module")
def loaded(tiny_dir) -> LoadedModel:
    return load(tiny_dir)


@pytest.fixture(scope="module")
def client(server, loaded) -> RemoteInferenceClient:
    return make_client(server, tokenizer=loaded.tokenizer)  # SkyRL passes the policy tokenizer


@pytest.fixture(scope="module")
def rows(loaded, tmp_path_factory) -> list[dict]:
    """The pinned test mazes as SkyRL's dataset hands them to the trainer."""
    register_env()
    _, eval_path = write_datasets(tmp_path_factory.mktemp("data"), n_train=1, eval_set=EVAL_SET)
    dataset = PromptDataset(
        [str(eval_path)], loaded.tokenizer, max_prompt_length=512, num_workers=1
    )
    return dataset.collate_fn([dataset[i] for i in range(N_MAZES)])


def play(client, loaded, rows, sampling: SamplingParams, *, max_turns: int, n_samples: int):
    """Episodes by SkyRL's VLM generator, configured as SkyRL's own generator tests do."""
    gen_input, _ = prepare_generator_input(
        rows, n_samples, get_sampling_params_for_backend("vllm", sampling), ENV_ID, "train", 0
    )
    cfg = GeneratorConfig(
        sampling_params=sampling,
        max_input_length=2048,
        batched=False,
        max_turns=max_turns,
        use_conversation_multi_turn=True,
        chat_template=ChatTemplateConfig(source="name", name_or_path=None),
        step_wise_trajectories=False,
        vision_language_generator=True,
    )
    generator = SkyRLVLMGymGenerator(
        cfg, SkyRLGymConfig(max_env_workers=0), client, loaded.tokenizer
    )
    t0 = time.monotonic()
    out = run(client, generator.generate(gen_input, disable_tqdm=True))
    return Rollout(gen_input, out, time.monotonic() - t0)


@pytest.fixture(scope="module")
def rollout(client, loaded, rows) -> Rollout:
    """Random-policy episodes: vLLM may sample only a move word or `<|im_end|>` (biased up), so
    most answers are one move and the episodes are random walks. Temperature 1 and no seed: one
    seed for every request makes a near-uniform model write the same answer everywhere."""
    words = [loaded.tokenizer.convert_tokens_to_ids(a.word) for a in Action]
    sampling = SamplingParams(
        max_generate_length=2,
        temperature=1.0,
        logprobs=1,
        additional_kwargs={
            "allowed_token_ids": [*words, loaded.eos_id],
            "logit_bias": {loaded.eos_id: 3.0},
        },
    )
    result = play(client, loaded, rows, sampling, max_turns=MAX_TURNS, n_samples=N_SAMPLES)
    print(f"\n{N_MAZES * N_SAMPLES} episodes in {result.seconds:.1f} s")
    return result


def turn_segments(loss_mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of generated tokens (loss mask 1)."""
    runs, start = [], None
    for i, m in enumerate([*loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def replay(loaded, extras, response_ids, loss_mask, *, max_turns: int = MAX_TURNS) -> Replay:
    """The generator's episode again, through rlkit's own env built from the row's maze."""
    env = make_env(maze_from_extras(extras), replace(env_for_set(EVAL_SET), max_turns=max_turns))
    conversation, _ = env.init()
    segments = turn_segments(loss_mask)
    texts, conversations, reward = [], [], 0.0
    for start, end in segments:
        # what the env got: the client's local detokenize (batch_decode) of the same ids
        text = loaded.tokenizer.batch_decode([response_ids[start:end]])[0]
        texts.append(text)
        conversations.append(list(conversation))
        step = env.step(text)
        reward += step["reward"]
        conversation = [*conversation, {"role": "assistant", "content": text}]
        conversation += step["observations"]
    return Replay(texts, segments, conversations, reward, env.get_metrics(), env.done)


def replay_all(loaded, result: Rollout, **kw) -> list[Replay]:
    out = result.output
    parts = (result.generator_input["env_extras"], out["response_ids"], out["loss_masks"])
    return [replay(loaded, *p, **kw) for p in zip(*parts, strict=True)]


@pytest.fixture(scope="module")
def replays(rollout, loaded) -> list[Replay]:
    return replay_all(loaded, rollout)


def test_episodes_complete_and_rewards_match_rlkit_replay(rollout, replays):
    """SkyRL's episodes are valid generator output, and each reward is rlkit's env verdict."""
    out = rollout.output
    validate_generator_output(len(rollout.generator_input["prompts"]), out)
    assert len(replays) == N_MAZES * N_SAMPLES
    for i, rep in enumerate(replays):
        assert rep.done and 1 <= len(rep.texts) <= MAX_TURNS, f"episode {i}: {rep.texts}"
        assert sum(out["rewards"][i]) == rep.reward, f"episode {i}: {rep.texts}"
        assert out["env_metrics"][i] == rep.metrics
    moves = sum(r.metrics["turns"] - r.metrics["parse_errors"] for r in replays)
    solved = sum(r.reward for r in replays)
    print(f"\nturns {[len(r.texts) for r in replays]}, moves {moves}, solved {solved}")
    assert moves > len(replays) * MAX_TURNS / 4, "most answers should be one move"


def test_rendered_prompts_equal_rlkit_encoding_turn_by_turn(rollout, replays, loaded):
    """Every turn's generation input (SkyRL's token stream so far, as vLLM rendered it) is the
    id sequence rlkit's ChatEncoder builds for the same conversation.

    Also pinned: an answer ending in `<|im_end|>` is followed by a second `<|im_end|>`. SkyRL's
    client detokenizes with `batch_decode` (special tokens kept), so the assistant message holds
    the end-of-turn token and the chat template adds its own: the model conditions on
    `<|im_end|><|im_end|>` between turns, in rollout and training alike (not Qwen's format).
    """
    out, eos, doubled = rollout.output, loaded.eos_id, 0
    for i, rep in enumerate(replays):
        prompt, response = out["prompt_token_ids"][i], out["response_ids"][i]
        stream = prompt + response
        for k, (conv, (start, end)) in enumerate(zip(rep.conversations, rep.segments, strict=True)):
            ours = loaded.encoder.encode(conv).prompt_ids
            assert stream[: len(prompt) + start] == ours, f"episode {i} turn {k}"
            if response[end - 1] == eos and k < len(rep.segments) - 1:
                assert response[end] == eos, f"episode {i} turn {k}: one <|im_end|>"
                doubled += 1
    print(f"\n{doubled} answers ended in <|im_end|>, each followed by the template's own")
    assert doubled > 0


def test_non_canonical_answer_tokens_desync_skyrl_stream(client, loaded, rows):
    """SkyRL's VLM generator re-renders the conversation each turn and assumes the result
    extends the previous ids (its own NOTE). A sampled tokenization that is not the canonical
    one of its text breaks that: two single-space tokens come back from the template as one
    `ĠĠ` token, SkyRL keeps the sampled ids and slices the observation at the old length, and
    the template's `<|im_end|>` falls out. The trainer then scores a sequence vLLM never saw.
    A real Qwen tokenizer has many such merges; temperature-1 sampling hits them now and then.
    """
    tok = loaded.tokenizer
    space, two_spaces = tok.convert_tokens_to_ids("Ġ"), tok.convert_tokens_to_ids("ĠĠ")
    sampling = SamplingParams(
        max_generate_length=2, logprobs=1, additional_kwargs={"allowed_token_ids": [space]}
    )
    result = play(client, loaded, rows[:1], sampling, max_turns=2, n_samples=1)
    (rep,) = replay_all(loaded, result, max_turns=2)
    prompt, response = result.output["prompt_token_ids"][0], result.output["response_ids"][0]
    assert response[:2] == [space, space] and rep.texts[0] == "  "
    seen = loaded.encoder.encode(rep.conversations[1]).prompt_ids  # vLLM's turn-2 input
    rendered = run(
        client,
        client.render_chat_completion(
            {"json": {"model": client.model_name, "messages": rep.conversations[1]}}
        ),
    )
    assert rendered["token_ids"] == seen
    n = len(prompt)
    assert seen[n : n + 2] == [two_spaces, loaded.eos_id]
    stream = prompt + response
    assert stream[n : n + 2] == [space, space] and stream[n + 2] == seen[n + 2]
    assert stream[: len(seen)] != seen and loaded.eos_id not in stream[n : n + 3]


def test_image_placeholders_expand_as_vllm_processor(client, replays, loaded):
    """vLLM's render expands each image into t*h*w / merge**2 `<|image_pad|>` tokens, at the
    offsets where rlkit's encoding puts them."""
    image_pad = loaded.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    conversation = max(replays, key=lambda r: len(r.texts)).conversations[-1]
    body = {"json": {"model": client.model_name, "messages": conversation}}
    rendered = run(client, client.render_chat_completion(body))
    ours = loaded.encoder.encode(conversation)
    ids = rendered["token_ids"]
    assert ids == ours.prompt_ids
    placeholders = rendered["features"]["mm_placeholders"]["image"]
    per_image = [int(g.prod()) // loaded.encoder.merge**2 for g in ours.image_grid_thw]
    assert len(placeholders) == len(per_image) == sum(m["role"] == "user" for m in conversation)
    assert [p["length"] for p in placeholders] == per_image
    for p in placeholders:
        assert ids[p["offset"] : p["offset"] + p["length"]] == [image_pad] * p["length"]
    assert ids.count(image_pad) == sum(per_image)
    print(f"\n{len(per_image)} images x {per_image[0]} tokens each (grid {ours.image_grid_thw[0]})")


def test_decode_mm_kwargs_gives_rlkit_pixels(rollout, replays, loaded):
    """SkyRL's `decode_mm_kwargs` gives the last render's images: grids and pixel values equal
    to rlkit's own encoding, float32 and normalised, with the presets' engine settings.

    vLLM 0.32's default (`mm_device_do_normalize` on for Qwen3-VL) normalises on the GPU and
    ships raw uint8 patches instead; SkyRL 0.4.0 puts them unchanged into
    `GeneratorOutput.pixel_values`, and its trainer's HF forward only casts them: 0..255 where
    the rollout saw -1..1, measured 0.47-0.57 nats off in the trainer's logprobs. The cluster's
    vLLM 0.30 declares that support only for Qwen2-VL and Qwen2.5-VL; the presets set
    `mm_device_do_normalize=false` (0.30 has the argument) so a vLLM upgrade cannot open the gap.
    """
    out = rollout.output
    for i, rep in enumerate(replays):
        ours = loaded.encoder.encode(rep.conversations[-1])
        pixels = out["pixel_values"][i]
        assert pixels.dtype == torch.float32 and pixels.shape == ours.pixel_values.shape
        np.testing.assert_array_equal(out["image_grid_thw"][i].numpy(), ours.image_grid_thw)
        np.testing.assert_allclose(pixels.numpy(), ours.pixel_values, atol=1e-6, rtol=0)


def test_server_flags_are_the_presets_engine_settings():
    from rlkit.cluster.skyrl.overrides import MM_CACHE_KWARG, engine_kwargs
    from rlkit.cluster.skyrl.presets import PRESETS

    flags = dict((f[0], f[1:]) for f in SERVER_ARGS)
    for preset in PRESETS.values():
        assert any(k.endswith(".mm_device_do_normalize=false") for k in engine_kwargs(preset))
    assert "--no-mm-device-do-normalize" in flags
    cpu = PRESETS["skyrl-tiny-cpu"]
    cache = f".engine_init_kwargs.{MM_CACHE_KWARG}={cpu.layout.mm_cache_gb}"
    assert any(k.endswith(cache) for k in engine_kwargs(cpu))
    assert float(flags["--mm-processor-cache-gb"][0]) == cpu.layout.mm_cache_gb > 0


def test_skyrl_client_requests_vllm_032_does_not_serve(server, client, loaded):
    """Which requests of SkyRL 0.4.0's client a plain vLLM 0.32 server answers differently.

    - POST `/skyrl/v1/generate`: the client uses it instead of `/inference/v1/generate` when
      routed experts (R3) or sample-support capture is on; only SkyRL's server actor defines
      it. On the cluster (vLLM 0.30 under SkyRL's actor) it exists; behind plain `vllm serve`
      those features fail with 404.
    - POST `/finish_session?session_id=...`: SkyRL's router (vllm-router) serves it, vLLM does
      not; the client only logs a warning. Session-sticky routing needs SkyRL's router.
    - POST `/reset_prefix_cache` with JSON `{"reset_running_requests": true}` (after every
      weight sync): vLLM's dev route answers (`{"success": ...}`) and reads that flag only from
      the query string, so it resets with False. Same on the cluster: SkyRL's actor adds its own
      JSON route after `build_app`, which (dev mode on, as SkyRL sets) has already registered
      vLLM's; the first match wins, in 0.30 as in 0.32. With paused requests holding blocks the
      reset then fails (`success: false`, unchecked); SkyRL's per-weight-version cache salt
      still keeps new requests off the old weights' cache.
    The rest of the generator's path (render, `/inference/v1/generate`, pause/resume, world
    size with VLLM_SERVER_DEV_MODE=1) works, as the other tests show.
    """
    prompt = loaded.encoder.encode([{"role": "user", "content": "hi"}]).prompt_ids
    side_channel = make_client(server, enable_return_sample_support_set=True)
    batch = {
        "prompt_token_ids": [prompt],
        "sampling_params": {"max_tokens": 2},
        "return_sample_support": True,
    }
    with pytest.raises(aiohttp.ClientResponseError) as err:
        run(side_channel, side_channel.generate(batch))
    assert err.value.status == 404
    assert str(err.value.request_info.url) == f"{server.url}/skyrl/v1/generate"

    request = urllib.request.Request(f"{server.url}/finish_session?session_id=0_0", method="POST")
    with pytest.raises(urllib.error.HTTPError) as http_err:
        urllib.request.urlopen(request, data=b"", timeout=10)
    assert http_err.value.code == 404
    run(client, client.finish_session("0_0"))  # swallowed: a warning, no error

    reset = run(client, client.reset_prefix_cache(reset_running_requests=True))
    assert reset[server.url]["status"] == 200 and "success" in reset[server.url]["body"]
    flag = inspect.signature(vllm_cache_routes.reset_prefix_cache).parameters
    assert isinstance(flag["reset_running_requests"].default, Query)

    assert run(client, client.get_world_size()) == (1, 1)
    run(client, client.pause())
    run(client, client.resume())


def parity_samples(client, loaded, replays, rollout):
    """(prompts, responses, vLLM logprobs): every episode turn as SkyRL recorded it, and a
    seeded free sample (any token but the vision ones: rlkit's free-sampling support) from
    each maze's first and last prompt."""
    out = rollout.output
    prompts, responses, vllm_lps = [], [], []
    for i, rep in enumerate(replays):
        for conv, (start, end) in zip(rep.conversations, rep.segments, strict=True):
            prompts.append(loaded.encoder.encode(conv))
            responses.append(out["response_ids"][i][start:end])
            vllm_lps.append(out["rollout_logprobs"][i][start:end])
    banned = {loaded.tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    sampling = {
        "max_tokens": 16,
        "temperature": 1.0,
        "seed": SEED,
        "logprobs": 1,
        "allowed_token_ids": [t for t in range(len(loaded.tokenizer)) if t not in banned],
    }
    for conv in (
        c for r in replays[::N_SAMPLES] for c in (r.conversations[0], r.conversations[-1])
    ):
        rendered = run(client, client.render_chat_completion({"json": {"messages": conv}}))
        batch = {
            "prompt_token_ids": [rendered["token_ids"]],
            "sampling_params": sampling,
            "mm_features": [rendered["features"]],
        }
        # one request at a time: on CPU a seeded request whose prefill gets chunked kills the
        # vLLM 0.32 engine ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync)
        first, again = (run(client, client.generate(batch)) for _ in range(2))
        assert first["response_ids"] == again["response_ids"], "a fixed seed repeats its sample"
        prompts.append(loaded.encoder.encode(conv))
        responses.append(first["response_ids"][0])
        vllm_lps.append(first["response_logprobs"][0])
    return prompts, responses, [np.asarray(v, np.float32) for v in vllm_lps]


def trainer_logprobs(loaded, prompts, responses, *, mask_vision: bool) -> list[np.ndarray]:
    with torch.no_grad():
        batch = build_batch(loaded, prompts, responses)
        logp, _ = response_logprobs(loaded, batch, temperature=1.0, mask_vision=mask_vision)
    return [logp[b, : len(r)].numpy() for b, r in enumerate(responses)]


def with_skyrl_pixels(enc: Encoded, pixel_values: torch.Tensor) -> Encoded:
    """`enc` with its images replaced by SkyRL's `GeneratorOutput.pixel_values`, as the trainer
    gets them (cast to float, as the HF patch embedding does)."""
    chunks = np.split(pixel_values.float().numpy(), np.cumsum(enc.image_grid_thw.prod(1))[:-1])
    return Encoded(
        enc.prompt_ids, list(zip(chunks, enc.image_grid_thw, strict=True)), enc.patch_dim
    )


def test_vllm_logprobs_match_rlkit_training_forward(client, loaded, replays, rollout):
    """Rollout (vLLM) vs trainer (rlkit) logprobs of the same sampled tokens.

    Their gap is the rollout-vs-trainer mismatch that biases the PPO/GRPO importance ratio
    exp(logp_trainer - logp_rollout) before any update. Measured, float32 on CPU:
    - over the same vocabulary (rlkit `mask_vision=False`: vLLM reports raw logprobs over the
      whole vocabulary, whatever `allowed_token_ids` or `logit_bias` say) they agree to ~1e-6;
    - rlkit's default masks the 5 vision tokens, so it is higher by -log(1 - p_vision): ~0.009
      nat per token for the random tiny model, a ratio of ~1.009 per token.
    """
    prompts, responses, vllm_lps = parity_samples(client, loaded, replays, rollout)
    vllm = np.concatenate(vllm_lps)
    full = np.concatenate(trainer_logprobs(loaded, prompts, responses, mask_vision=False))
    masked = np.concatenate(trainer_logprobs(loaded, prompts, responses, mask_vision=True))
    same_vocab, offset = np.abs(full - vllm).max(), masked - vllm
    print(
        f"\n{len(prompts)} sequences, {vllm.size} tokens: max |vLLM - rlkit full vocab| "
        f"{same_vocab:.1e}; rlkit masked - vLLM {offset.mean():.4f} "
        f"[{offset.min():.4f}, {offset.max():.4f}]"
    )
    assert same_vocab < LOGPROB_TOL
    assert offset.min() > 10 * LOGPROB_TOL, "masking the vision tokens raises every logprob"
    assert offset.max() - offset.min() < 0.5 * offset.mean(), "about constant per token"


def test_skyrl_pixels_give_the_trainer_vllm_logprobs(rollout, replays, loaded):
    """The trainer's logprobs from SkyRL's `GeneratorOutput.pixel_values` (what SkyRL trains
    on) and from rlkit's own patches, against vLLM's for each episode's last answer (that
    turn's prompt holds all of the episode's images): both ~5e-7 with the presets' engine
    settings (~0.5 nats from SkyRL's pixels under vLLM 0.32's default; see the decode test)."""
    out = rollout.output
    clean, skyrl, answers, ref = [], [], [], []
    for i, rep in enumerate(replays):
        start, end = rep.segments[-1]
        clean.append(loaded.encoder.encode(rep.conversations[-1]))
        skyrl.append(with_skyrl_pixels(clean[-1], out["pixel_values"][i]))
        answers.append(out["response_ids"][i][start:end])
        ref += out["rollout_logprobs"][i][start:end]
    gap = {
        name: np.abs(np.concatenate(trainer_logprobs(loaded, p, answers, mask_vision=False)) - ref)
        .max()
        .item()
        for name, p in (("rlkit", clean), ("skyrl", skyrl))
    }
    print(f"\nlast answers, max |vLLM - trainer|: {gap}")
    assert gap["rlkit"] < LOGPROB_TOL and gap["skyrl"] < LOGPROB_TOL
