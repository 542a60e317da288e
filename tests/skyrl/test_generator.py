"""SkyRL's own VLM generator plays rlkit-maze: contract test 1.

SkyRL 0.4.0's `SkyRLVLMGymGenerator`, configured from the cluster preset's own overrides
(`SkyRLTrainConfig.from_cli_overrides`), reads rows that `rlkit data` wrote through SkyRL's
`PromptDataset` and `prepare_generator_input` (the trainer's path), builds rlkit's env through
skyrl-gym, and talks to a scripted engine (the only fake). Each episode is then replayed in
rlkit's own env from the engine's answers: SkyRL's reward must be rlkit's verdict.

The placeholder tests below drive rlkit's `RlkitVLMGenerator` (what `RlkitExp` runs) the same
way, with an engine whose sampled ids are not their text's canonical tokenization, and check
what Qwen3-VL's forward needs: every sample's image-pad runs equal its images' token counts (the
tiny model's own forward runs on them, as SkyRL's model wrapper calls it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import inspect
import math
import threading
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
import scripted_engine as se
import torch
from aiohttp import web
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output
from transformers import Qwen3VLForConditionalGeneration

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.bridge import rlkit_names
from rlkit.cluster.skyrl.capture import (
    Capturer,
    CaptureSettings,
    move_choices,
    probe_point,
    top_logprobs,
)
from rlkit.cluster.skyrl.experiment import RlkitExp
from rlkit.cluster.skyrl.generator import (
    DESYNC_METRIC,
    RlkitVLMGenerator,
    build_capturer,
    image_runs,
    observation_start,
)
from rlkit.cluster.skyrl.presets import build_overrides, get_preset
from rlkit.env.maze_env import ENV_ID, MazeEnv
from rlkit.errors import UsageError
from rlkit.maze.core import Action
from rlkit.maze.parsing import parse_actions
from rlkit.run.captures import capture_steps, pick_groups, read_step

PLAYERS = {
    "oracle": se.oracle,
    "verbose": se.verbose_oracle,
    "wall-bumper": se.wall_bumper,
    "garbage": se.garbage,
    "rambler": se.rambler,
}


@pytest.fixture(scope="module", params=["test", "test-large"])
def dataset(request, tmp_path_factory, tokenizer) -> tuple[str, PromptDataset]:
    """The eval rows of a pinned set as `rlkit data` writes them, read by SkyRL's dataset."""
    out = tmp_path_factory.mktemp(f"data-{request.param}")
    assert rlkit_main(["data", "--out", str(out), "--train", "4", "--set", request.param]) == 0
    ds = PromptDataset(
        [str(out / "eval.parquet")], tokenizer, max_prompt_length=4096, num_workers=1
    )
    assert len(ds) == 64
    return request.param, ds


def preset_config(**generator_changes) -> SkyRLTrainConfig:
    cfg = SkyRLTrainConfig.from_cli_overrides(
        build_overrides(get_preset("qwen3vl-8b-6gpu"), "contract")
    )
    if generator_changes:
        cfg.generator = dataclasses.replace(cfg.generator, **generator_changes)
    return cfg


def play(
    cfg,
    ds,
    encoder,
    player,
    mazes=range(8),
    samples=2,
    generator_cls=SkyRLVLMGymGenerator,
    tokenize=se.canonical,
    keeps_special=False,
):
    """`generator_cls`'s generate over `mazes` x `samples`; returns (input, output, engine)."""
    rows = [ds.dataframe[i] for i in range(len(ds))]
    engine = se.ScriptedEngine(encoder, rows, player, tokenize, keeps_special)
    extra = {"merge_size": encoder.merge} if generator_cls is RlkitVLMGenerator else {}
    generator = generator_cls(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=engine,
        tokenizer=encoder.tokenizer,
        **extra,
    )
    prompts = ds.collate_fn([ds[i] for i in mazes])
    params = get_sampling_params_for_backend(
        cfg.generator.inference_engine.backend, cfg.generator.sampling_params
    )
    batch, _ = prepare_generator_input(prompts, samples, params, ENV_ID, "train", 0)
    with patch("skyrl.train.generators.skyrl_vlm_generator.decode_mm_kwargs", se.decode_features):
        out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    validate_generator_output(len(batch["prompts"]), out)
    return batch, out, engine


def session_of(batch, i: int) -> str:
    tid = batch["trajectory_ids"][i]
    return f"{tid.instance_id}_{tid.repetition_id}"


def replay(extras: dict, texts: list[str]) -> MazeEnv:
    """rlkit's own env, built as skyrl-gym builds it, fed the engine's answers."""
    env = MazeEnv({}, extras)
    env.init()
    for text in texts:
        assert not env.done, "SkyRL asked for a move after rlkit's env had ended the episode"
        env.step(text)
    return env


@pytest.mark.parametrize("name", list(PLAYERS))
def test_skyrl_rewards_are_rlkit_verdicts(dataset, encoder, name):
    set_name, ds = dataset
    # room for 24 turns of the tiny model's images (576 tokens at patch 8, where Qwen3-VL's
    # patch 16 makes 144): the input-length cut has its own test below
    cfg = preset_config(max_input_length=32768)
    # test-large episodes run 24 turns of growing prompts: 4 mazes x 1 say as much as 8 x 2
    mazes, samples = (range(4), 1) if set_name == "test-large" else (range(8), 2)
    batch, out, engine = play(cfg, ds, encoder, PLAYERS[name], mazes=mazes, samples=samples)
    solved = []
    for i in range(len(batch["prompts"])):
        s = engine.sessions[session_of(batch, i)]
        env = replay(batch["env_extras"][i], s.texts)
        reward, mask, ids = out["rewards"][i], out["loss_masks"][i], out["response_ids"][i]
        stop = out["stop_reasons"][i]
        # SkyRL ends an episode where rlkit's env does, or earlier only at its input-length cut
        assert env.done or stop == "length"
        assert sum(reward) == (1.0 if env.terminated else 0.0)
        solved.append(env.terminated)
        # the reward sits on the last generated token of the final turn, nowhere else
        last_model_token = max(j for j, m in enumerate(mask) if m == 1)
        assert all(r == 0.0 for j, r in enumerate(reward) if j != last_model_token)
        # the loss mask covers exactly the tokens the engine produced, in order
        assert [t for t, m in zip(ids, mask, strict=True) if m == 1] == sum(s.ids, [])
        # everything else is observation: the next turn's picture and the chat scaffolding
        obs = encoder.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
        assert obs.count("<|vision_start|>") == len(s.texts) - (1 if env.done else 0)
    if name in ("oracle", "verbose"):
        assert all(solved), f"{name} must solve every {set_name} maze"
    else:
        assert not any(solved)
    if name == "rambler":  # cut at max_tokens every turn, like a real engine
        assert all(r == "length" for s in engine.sessions.values() for r in s.stop_reasons)
    # rlkit's env metrics reach SkyRL's aggregation (skyrl-gym calls MazeEnv.aggregate_metrics)
    metrics = out["rollout_metrics"]
    assert metrics["environment/solve_rate"] == pytest.approx(sum(solved) / len(solved))
    assert "environment/wall_bumps_mean" in metrics and "environment/turns_mean" in metrics
    assert sorted(engine.finished) == sorted(engine.sessions)


def test_skyrl_max_turns_ends_episodes(dataset, encoder):
    """SkyRL hands `generator.max_turns` to the env as extras; the env must end the episode."""
    _, ds = dataset
    cfg = preset_config(max_turns=3)
    batch, out, engine = play(cfg, ds, encoder, se.wall_bumper, mazes=range(4), samples=1)
    for i in range(len(batch["prompts"])):
        assert batch["env_extras"][i]["max_turns"] == 3
        assert len(engine.sessions[session_of(batch, i)].texts) == 3
        assert out["stop_reasons"][i] == "stop" and sum(out["rewards"][i]) == 0.0


def test_conversation_images_are_data_uris(dataset, encoder):
    _, ds = dataset
    _, _, engine = play(preset_config(), ds, encoder, se.oracle, mazes=range(2), samples=1)
    parts = [
        p
        for conversation in engine.rendered
        for m in conversation
        if isinstance(m["content"], list)
        for p in m["content"]
    ]
    images = [p for p in parts if p.get("type") != "text"]
    assert images and all(p["type"] == "image_url" for p in images)
    assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in images)


def test_input_length_cut_scores_zero(dataset, encoder):
    """A conversation past `generator.max_input_length` stops with 'length', unrewarded."""
    _, ds = dataset
    first_prompt, _ = MazeEnv({}, ds[0][2]).init()
    room = len(encoder.encode(first_prompt).prompt_ids) + 60  # the first turn or two fit
    cfg = preset_config(max_input_length=room)
    batch, out, engine = play(cfg, ds, encoder, se.verbose_oracle, mazes=range(4), samples=1)
    for i in range(len(batch["prompts"])):
        env = replay(batch["env_extras"][i], engine.sessions[session_of(batch, i)].texts)
        if out["stop_reasons"][i] == "length":
            assert not env.done and sum(out["rewards"][i]) == 0.0
        else:
            assert env.terminated and sum(out["rewards"][i]) == 1.0
    assert "length" in out["stop_reasons"]


def test_rows_reach_the_env_as_skyrl_passes_them(dataset, tmp_path: Path):
    """Every row column but prompt/env_class arrives as extras, plus SkyRL's max_turns."""
    _, ds = dataset
    messages, env_class, extras, uid = ds[0]
    assert env_class == ENV_ID and uid == "0"
    assert set(extras) == {"data_source", "reward_spec", "extra_info"}
    env = MazeEnv({}, {**extras, "max_turns": 5})
    assert env.max_turns == 5


# --- image placeholders: a non-canonical answer costs no sample, a stray pad costs one, counted


@pytest.fixture(scope="module")
def tiny_model(tiny_dir):
    return Qwen3VLForConditionalGeneration.from_pretrained(tiny_dir, dtype=torch.float32).eval()


def pads_match(out, i: int, encoder) -> bool:
    """What Qwen3-VL's forward checks: image-pad tokens == features (t*h*w / merge**2 each)."""
    image_pad = encoder.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    ids = out["prompt_token_ids"][i] + out["response_ids"][i]
    features = int(out["image_grid_thw"][i].prod(-1).sum()) // encoder.merge**2
    return ids.count(image_pad) == features


@torch.no_grad()
def forward(model, out, i: int) -> torch.Tensor:
    """Sample i through the tiny model as SkyRL's model wrapper calls it (`model_wrapper.py`
    389-400: image tokens marked by id, the sample's pixel values and grids)."""
    ids = torch.tensor([out["prompt_token_ids"][i] + out["response_ids"][i]])
    return model(
        ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=out["pixel_values"][i],
        image_grid_thw=out["image_grid_thw"][i],
        mm_token_type_ids=(ids == model.config.image_token_id).long(),
    ).logits


def split(out, i: int) -> tuple[list[int], list[int]]:
    """(sampled tokens, observation tokens) of sample i, by its loss mask."""
    pairs = list(zip(out["response_ids"][i], out["loss_masks"][i], strict=True))
    return [t for t, m in pairs if m == 1], [t for t, m in pairs if m == 0]


@pytest.mark.parametrize("keeps_special", [False, True], ids=["vllm-text", "skyrl-client-text"])
@pytest.mark.parametrize("dataset", ["test"], indirect=True)  # one set: ~7 s, not ~45
def test_noncanonical_answers_keep_their_images(dataset, encoder, tiny_model, keeps_special):
    """Each answer sampled one token per character: SkyRL's slice drops image pads (and its
    forward fails as on the CPU run); rlkit's generator keeps every sample whole. Both ways an
    answer's text may come: without its end of turn, and with it (SkyRL's client)."""
    _, ds = dataset
    cfg = preset_config(max_input_length=32768)
    runs = {
        (cls, tok): play(cfg, ds, encoder, se.oracle, range(4), 2, cls, tok, keeps_special)
        for cls in (SkyRLVLMGymGenerator, RlkitVLMGenerator)
        for tok in (se.canonical, se.spelled)
    }
    _, canon, _ = runs[SkyRLVLMGymGenerator, se.canonical]
    for key in ("prompt_token_ids", "response_ids", "loss_masks", "rewards", "stop_reasons"):
        assert runs[RlkitVLMGenerator, se.canonical][1][key] == canon[key], key

    _, skyrl, _ = runs[SkyRLVLMGymGenerator, se.spelled]
    broken = [i for i in range(len(skyrl["response_ids"])) if not pads_match(skyrl, i, encoder)]
    assert broken, "SkyRL's own slice no longer desyncs: RlkitVLMGenerator may be retired"
    with pytest.raises(ValueError, match="Image features and image tokens do not match"):
        forward(tiny_model, skyrl, broken[0])

    batch, ours, engine = runs[RlkitVLMGenerator, se.spelled]
    assert ours["rollout_metrics"][DESYNC_METRIC] == 0
    for i in range(len(batch["prompts"])):
        assert pads_match(ours, i, encoder)
        sampled, observed = split(ours, i)
        assert sampled == sum(engine.sessions[session_of(batch, i)].ids, [])
        assert observed == split(canon, i)[1], "observations exactly as rendered"
        assert sum(ours["rewards"][i]) == sum(canon["rewards"][i]) == 1.0
    assert torch.isfinite(forward(tiny_model, ours, 0)).all()


@pytest.mark.parametrize("dataset", ["test"], indirect=True)  # one set: ~7 s, not ~45
def test_sampled_image_pad_costs_a_counted_sample(dataset, encoder, tiny_model):
    """Repetition 0 draws `<|image_pad|>` before every answer (vLLM's text skips it): those
    samples keep their prompt's image only, train nothing and are counted; the others are
    exactly the canonical run's."""
    _, ds = dataset
    cfg = preset_config(max_input_length=32768)
    stray = se.drawing("<|image_pad|>", frozenset({0}))
    _, canon, _ = play(cfg, ds, encoder, se.oracle, range(4), 2, RlkitVLMGenerator)
    _, skyrl, _ = play(cfg, ds, encoder, se.oracle, range(4), 2, SkyRLVLMGymGenerator, stray)
    assert not all(pads_match(skyrl, i, encoder) for i in range(len(skyrl["response_ids"])))

    batch, ours, _ = play(cfg, ds, encoder, se.oracle, range(4), 2, RlkitVLMGenerator, stray)
    guarded = [i for i, t in enumerate(batch["trajectory_ids"]) if t.repetition_id == 0]
    assert ours["rollout_metrics"][DESYNC_METRIC] == len(guarded) == 4
    assert rlkit_names(ours["rollout_metrics"])["rollout/placeholder_desyncs"] == 4  # as logged
    for i in range(len(batch["prompts"])):
        assert pads_match(ours, i, encoder)
        if i in guarded:
            assert not any(ours["loss_masks"][i]) and sum(ours["rewards"][i]) == 1.0
            (grid,) = ours["image_grid_thw"][i]  # the prompt's one image
            assert ours["pixel_values"][i].shape[0] == int(grid.prod())
        else:
            for key in ("response_ids", "loss_masks", "rewards"):
                assert ours[key][i] == canon[key][i], key
    assert torch.isfinite(forward(tiny_model, ours, guarded[0])).all()


def test_observation_starts_after_the_answers_end_of_turn():
    eos = 2  # ids: prompt 7 8, answer 5, eos, "\n", observation 9 6 6 eos "\n", prompt 4
    render = [7, 8, 5, eos, 1, 9, 6, 6, eos, 1, 4]
    assert observation_start(render, 1, eos, answer_ended=True) == 4  # the sampled eos is it
    assert observation_start(render, 1, eos, answer_ended=False) == 3  # cut short: it is obs
    assert observation_start(render, 2, eos, answer_ended=True) is None
    kept = [7, 8, 5, eos, eos, 1, 9, 6, 6, eos, 1, 4]  # the answer's text kept its eos
    assert observation_start(kept, 1, eos, answer_ended=True) == 4  # the template's is obs
    assert image_runs([6, 6, 1, 6, 6, 6, 1], 6) == [2, 3]
    assert image_runs([6, 1, 6], 6) == [1, 1]


def test_restated_loop_follows_skyrls():
    """RlkitVLMGenerator.agent_loop restates SkyRL 0.4.0's; a new SkyRL must be re-read."""
    source = inspect.getsource(SkyRLVLMGymGenerator.agent_loop).encode()
    assert hashlib.sha256(source).hexdigest()[:16] == "b8b62e5d71ea9cc0", (
        "SkyRL's VLM agent_loop changed: port its changes to RlkitVLMGenerator.agent_loop (or "
        "retire it if SkyRL now finds observations itself), then update this hash"
    )


def test_experiment_runs_rlkit_generator(tiny_dir, encoder):
    cfg = preset_config()
    cfg.trainer.policy.model.path = str(tiny_dir)
    # BasePPOExp.__init__ builds datasets and a placement group; get_generator reads its args
    exp = RlkitExp.__new__(RlkitExp)
    generator = exp.get_generator(cfg, encoder.tokenizer, se.ScriptedEngine(encoder, [], se.oracle))
    assert type(generator) is RlkitVLMGenerator and generator.merge_size == encoder.merge == 2


# --- captured training rollouts: a few groups per step, with the engine's move probabilities

CHOSEN, OTHER = 0.7, 0.1
"""The scripted move distribution: the move the player wrote, and each other move."""


class ProbedEngine(se.ScriptedEngine):
    """The scripted engine, plus vLLM's `/inference/v1/generate` over HTTP for the probes (what
    SkyRL's router serves): a request must be a turn's prompt plus the sampled answer up to its
    `<action>`, and its logprobs give the move the player wrote CHOSEN and the others OTHER.
    `exact`: it serves `logprob_token_ids` (vLLM 0.32); otherwise it refuses them with HTTP 400,
    as an engine without them would, and on repetition 1 its top-k lacks one word. Features
    travel as JSON, as vLLM's do (here a key to the patches)."""

    def __init__(self, *args, exact: bool, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.exact = exact
        self.features: dict[str, dict] = {}
        self.probes: list[dict] = []
        self.action = self.tokenizer.convert_tokens_to_ids("<action>")
        self.words = [self.tokenizer.convert_tokens_to_ids(a.word) for a in Action]
        self.url = ""

    def get_endpoint_url(self) -> str:
        return self.url

    async def render_chat_completion(self, request: dict) -> dict:
        out = await super().render_chat_completion(request)
        key = str(len(self.features))
        self.features[key] = out["features"]["kwargs_data"]
        return {**out, "features": {"kwargs_data": {"ref": key}}}

    def decode(self, kwargs_data: dict | None) -> dict:
        return se.decode_features(kwargs_data and self.features[kwargs_data["ref"]])

    def answer_probe(self, body: dict, session_id: str) -> dict | None:
        """vLLM's answer to a probe, or None for HTTP 400."""
        params = body["sampling_params"]
        if "logprob_token_ids" in params:
            if not self.exact:
                return None
            assert params == {"max_tokens": 1, "temperature": 1.0, "logprobs": 4,
                              "logprob_token_ids": self.words,
                              "allowed_token_ids": self.words}  # fmt: skip
        else:
            assert params == {"max_tokens": 1, "temperature": 1.0, "logprobs": 20}
        ids = body["token_ids"]
        turns = [r["prompt_token_ids"][0] for r in self.requests[session_id]]
        (t,) = [t for t, p in enumerate(turns) if ids == [*p, self.action]]
        assert body["features"] == self.requests[session_id][t]["mm_features"][0]
        self.probes.append({"session": session_id, "turn": t})
        s = self.sessions[session_id]
        moves, _ = parse_actions(s.texts[t])
        chosen = moves[0]
        topk_rep1 = not self.exact and session_id.endswith("_1")
        left_out = Action((chosen + 1) % 4) if topk_rep1 else None
        top = [
            (w, math.log(CHOSEN if a == chosen else OTHER))
            for a, w in zip(Action, self.words, strict=True)
            if a != left_out
        ]
        entries = [{"token_id": w, "logprob": lp} for w, lp in top]
        return {
            "choices": [
                {
                    "index": 0,
                    "token_ids": [top[0][0]],
                    "finish_reason": "length",
                    "logprobs": {"content": [{**entries[0], "top_logprobs": entries}]},
                }
            ]
        }


@contextlib.contextmanager
def serving(engine: ProbedEngine):
    """`engine`'s probe route on 127.0.0.1, in a thread of its own."""
    app = web.Application()

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        answer = engine.answer_probe(body, request.headers["X-Session-ID"])
        if answer is None:
            return web.json_response({"error": {"message": "unknown field"}}, status=400)
        return web.json_response(answer)

    app.router.add_post("/inference/v1/generate", generate)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    engine.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield engine
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def captured_call(cfg, ds, encoder, engine, phase: str, step: int, mazes=range(4), samples=4):
    """RlkitVLMGenerator, its capture as `build_generator` makes it, on one generate() call."""
    capturer = build_capturer(cfg, encoder.tokenizer, engine, "rlkit-tiny", CaptureSettings(2, 3))
    generator = RlkitVLMGenerator(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=engine,
        tokenizer=encoder.tokenizer,
        merge_size=encoder.merge,
        capturer=capturer,
    )
    prompts = ds.collate_fn([ds[i] for i in mazes])
    params = get_sampling_params_for_backend(
        cfg.generator.inference_engine.backend, cfg.generator.sampling_params
    )
    batch, _ = prepare_generator_input(prompts, samples, params, ENV_ID, phase, step)
    decode = getattr(engine, "decode", se.decode_features)

    async def call():
        try:
            return await generator.generate(batch, disable_tqdm=True)
        finally:
            if capturer.probe is not None:
                await capturer.probe.aclose()

    with patch("skyrl.train.generators.skyrl_vlm_generator.decode_mm_kwargs", decode):
        out = asyncio.run(call())
    validate_generator_output(len(batch["prompts"]), out)
    return batch, out


@pytest.mark.parametrize("exact", [True, False], ids=["logprob-token-ids", "top-k"])
@pytest.mark.parametrize("dataset", ["test"], indirect=True)
def test_a_training_call_captures_its_groups_with_move_probs(dataset, encoder, tmp_path, exact):
    _, ds = dataset
    cfg = preset_config(max_input_length=32768)
    cfg.trainer.ckpt_path = str(tmp_path)
    rows = [ds.dataframe[i] for i in range(len(ds))]
    with serving(ProbedEngine(encoder, rows, se.mixed, exact=exact)) as engine:
        batch, out = captured_call(cfg, ds, encoder, engine, "train", 7)

    episodes = read_step(tmp_path, 7)
    assert capture_steps(tmp_path) == [7]
    picked = pick_groups(range(4), 2, seed=cfg.trainer.seed, step=7)
    assert sorted({e.group for e in episodes}) == picked and len(episodes) == 2 * 4
    index = {session_of(batch, i): i for i in range(len(batch["prompts"]))}
    for group in picked:
        mine = [e for e in episodes if e.group == group]
        rewards = np.array([e.trajectory.reward for e in mine])
        # GRPO by hand: (r - mean) / (unbiased std + 1e-6), 0 for a group that all agreed
        spread = rewards.std(ddof=1)
        want = (rewards - rewards.mean()) / (spread + 1e-6) if spread > 0 else 0 * rewards
        assert [e.advantage for e in mine] == pytest.approx(want.tolist(), abs=1e-6)
    assert any(e.advantage != 0 for e in episodes), "se.mixed gives some groups both outcomes"
    for e in episodes:
        t = e.trajectory
        i = index[f"{e.group}_{t.sample}"]
        s = engine.sessions[f"{e.group}_{t.sample}"]
        assert t.reward == sum(out["rewards"][i]) and t.terminated == (t.reward == 1.0)
        assert t.max_turns == batch["env_extras"][i]["max_turns"] == cfg.generator.max_turns
        env = replay(batch["env_extras"][i], s.texts)  # the same answers in rlkit's own env
        assert [x.text for x in t.turns] == s.texts and len(t.turns) == env.turns
        assert t.turns[-1].pos_after == env.state.pos and t.terminated == env.terminated
        for turn in t.turns:
            (move,) = [Action[a.upper()] for a in turn.actions]
            if t.sample == 1 and not exact:  # a word left out of the engine's top 20: no bars
                assert turn.move_probs is None
            else:
                want = [CHOSEN if a == move else OTHER for a in Action]
                assert turn.move_probs == pytest.approx(want, abs=1e-4)
    probed = sum(len(e.trajectory.turns) for e in episodes)
    assert len(engine.probes) == probed  # one probe per captured turn, none for the rest
    metrics = out["rollout_metrics"]
    assert metrics["generate/capture_episodes"] == 8
    assert (
        metrics["generate/capture_bytes"]
        == (tmp_path / "rollouts/global_step_7.jsonl").stat().st_size
    )
    missing = (
        0 if exact else sum(len(e.trajectory.turns) for e in episodes if e.trajectory.sample == 1)
    )
    assert metrics["generate/capture_probe_misses"] == missing
    assert metrics["generate/capture_errors"] == 0
    assert rlkit_names(metrics)["rollout/capture_bytes"] > 0  # as the bridge logs it


@pytest.mark.parametrize("dataset", ["test"], indirect=True)
def test_an_eval_call_captures_nothing_keep_prunes_a_resume_drops(dataset, encoder, tmp_path):
    _, ds = dataset
    cfg = preset_config()
    cfg.trainer.ckpt_path = str(tmp_path)
    rows = [ds.dataframe[i] for i in range(len(ds))]

    def engine() -> se.ScriptedEngine:  # a fresh one per call (its sessions are per episode)
        return se.ScriptedEngine(encoder, rows, se.oracle)  # no HTTP face: no probabilities

    _, out = captured_call(cfg, ds, encoder, engine(), "eval", 3, range(2), 2)
    assert capture_steps(tmp_path) == [] and not any("capture" in k for k in out["rollout_metrics"])
    for step in (1, 2, 3, 4):
        captured_call(cfg, ds, encoder, engine(), "train", step, range(2), 2)
    assert capture_steps(tmp_path) == [2, 3, 4]  # keep 3, as checkpoints are pruned
    for e in read_step(tmp_path, 4):
        assert e.trajectory.solved and e.advantage == 0.0  # the oracle: zero-variance groups
        assert e.trajectory.turns and all(t.move_probs is None for t in e.trajectory.turns)
    # a new attempt resumed from checkpoint 1 trains step 2 again: the killed one's 3, 4 go
    captured_call(cfg, ds, encoder, engine(), "train", 2, range(2), 2)
    assert capture_steps(tmp_path) == [2]


def test_the_probe_asks_where_the_move_word_starts(tokenizer):
    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    answer = ids("I go <action>left</action>") + [tokenizer.eos_token_id]
    assert probe_point(tokenizer, answer) == (len(ids("I go <action>")), "")
    spelled = [t for ch in "<action>up</action>" for t in ids(ch)]
    assert probe_point(tokenizer, spelled) == (len("<action>"), "")
    assert probe_point(tokenizer, ids("<action>up</action> <action>down</action>"))[0] == 5
    assert probe_point(tokenizer, ids("left, I think")) is None
    words = tuple(tokenizer.convert_tokens_to_ids(a.word) for a in Action)
    assert move_choices(tokenizer, "") == words
    # '>' merged with the next character: the candidates would all be '>', so no bars
    assert probe_point(tokenizer, ids("<action") + ids(">,")) == (len(ids("<action")), ">")
    assert move_choices(tokenizer, ">") is None
    raw = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token_id": 5,
                            "logprob": -0.5,
                            "top_logprobs": [{"token_id": 6, "logprob": -1.0}],
                        }
                    ]
                }
            }
        ]
    }
    assert top_logprobs(raw, temperature=0.5) == {5: (-1.0,), 6: (-2.0,)}


def test_capture_refuses_an_estimator_rlkit_does_not_compute(tmp_path):
    cfg = preset_config()
    cfg.trainer.algorithm.advantage_estimator = "rloo"
    with pytest.raises(UsageError, match="capture_groups=0"):
        Capturer.from_config(cfg, CaptureSettings(), None)
    assert Capturer.from_config(cfg, CaptureSettings(groups=0), None).begin({}) is None
    with pytest.raises(UsageError, match="capture_groups=0"):
        get_preset("skyrl-tiny-cpu", advantage_estimator="rloo")
    assert get_preset("skyrl-tiny-cpu", advantage_estimator="rloo", capture_groups=0)
