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
import dataclasses
import hashlib
import inspect
from pathlib import Path
from unittest.mock import patch

import pytest
import scripted_engine as se
import torch
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
from rlkit.cluster.skyrl.experiment import RlkitExp
from rlkit.cluster.skyrl.generator import (
    DESYNC_METRIC,
    PHASES,
    RlkitVLMGenerator,
    image_runs,
)
from rlkit.cluster.skyrl.overrides import build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.cluster.skyrl.render import observation_start
from rlkit.env.maze_env import ENV_ID, MazeEnv

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
    """The 8B preset's config on rlkit's cell mazes (its 24 turns; VisGym's game, the presets'
    default: tests/skyrl/test_visgym_skyrl.py)."""
    preset = get_preset("qwen3vl-8b-6gpu", eval_set="test-large")
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "contract"))
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
        sequence = ours["prompt_token_ids"][i] + ours["response_ids"][i]
        for request in engine.requests[session_of(batch, i)]:  # no answer re-tokenized
            (ids,) = request["prompt_token_ids"]
            assert sequence[: len(ids)] == ids, "each turn's prompt is the trainer's sequence"
        assert torch.equal(ours["pixel_values"][i], canon["pixel_values"][i])
        assert sum(ours["rewards"][i]) == sum(canon["rewards"][i]) == 1.0
    assert torch.isfinite(forward(tiny_model, ours, 0)).all()
    # each turn's time is split by phase: every played turn timed, each phase's sum positive
    metrics = ours["rollout_metrics"]
    assert metrics["generate/timed_turns"] == sum(len(s.texts) for s in engine.sessions.values())
    assert all(metrics[f"generate/seconds_{phase}"] > 0 for phase in PHASES)


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
