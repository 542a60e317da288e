"""Training rollouts captured by rlkit's SkyRL generator (rlkit.cluster.skyrl.capture).

First exactly, with SkyRL's own config, dataset, `prepare_generator_input` and generate(), the
scripted engine of test_generator.py plus an HTTP probe route in vLLM's wire format: a training
call writes its picked groups with moves, reward, advantage and move probabilities, an eval
call writes nothing, keep-N prunes and a resumed attempt drops a killed one's steps.

Then on the SkyRL CPU run (tests/skyrl/cpu_run.py: 3 steps, killed after step 2 and resumed),
where the real engines answer (SkyRL's vLLM servers behind its router, the warm-started tiny
model): every trained step's groups, read back as a researcher reads them
(`open_run(run).captures(step)`), each turn with the engine's move probabilities.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
import scripted_engine as se
from aiohttp import web
from cpu_run import STEPS
from cpu_run import TIMEOUT as RUN_TIMEOUT
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (
    get_sampling_params_for_backend,
)
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output
from test_generator import preset_config, replay, session_of

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.bridge import rlkit_names
from rlkit.cluster.skyrl.capture import Capturer, top_logprobs
from rlkit.cluster.skyrl.generator import RlkitVLMGenerator, build_capturer
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.maze_env import ENV_ID, maze_from_extras
from rlkit.errors import UsageError
from rlkit.maze.core import Action, Maze
from rlkit.maze.parsing import parse_actions
from rlkit.model.action_tag import move_choices, probe_point
from rlkit.run import open_run
from rlkit.run.captures import capture_steps, pick_groups, read_step, step_path
from rlkit.run.rundir import RunDir
from rlkit.settings import CaptureConfig


@pytest.fixture(scope="module")
def test_set(tmp_path_factory, tokenizer) -> PromptDataset:
    """The `test` set's eval rows as `rlkit data` writes them, read by SkyRL's dataset."""
    out = tmp_path_factory.mktemp("data-test")
    assert rlkit_main(["data", "--out", str(out), "--train", "4", "--set", "test"]) == 0
    return PromptDataset([str(out / "eval.parquet")], tokenizer, 4096, num_workers=1)


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
    capturer = build_capturer(cfg, encoder.tokenizer, engine, "rlkit-tiny", CaptureConfig(2, 3))
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
def test_a_training_call_captures_its_groups_with_move_probs(test_set, encoder, tmp_path, exact):
    ds = test_set
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
        assert t.policy == "train@7"  # the step's weights played it, as a local capture says
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


def test_an_eval_call_captures_nothing_keep_prunes_a_resume_drops(test_set, encoder, tmp_path):
    ds = test_set
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
        Capturer.from_config(cfg, CaptureConfig(), None)
    assert Capturer.from_config(cfg, CaptureConfig(groups=0), None).begin({}) is None
    with pytest.raises(UsageError, match="capture_groups=0"):
        get_preset("skyrl-tiny-cpu", advantage_estimator="rloo")
    assert get_preset("skyrl-tiny-cpu", advantage_estimator="rloo", capture_groups=0)


# --- the SkyRL CPU run

GROUPS, GROUP_SIZE = 8, 4
"""The CPU run's capture (all 8 groups of a step, tests/skyrl/cpu_run.py) and its GRPO group
size."""


@pytest.mark.timeout(RUN_TIMEOUT)  # the first test that asks for the run pays for it
def test_each_trained_step_has_its_groups_with_move_probs(skyrl_cpu_run):
    run = open_run(skyrl_cpu_run.run_dir)
    assert run.capture_steps() == list(range(1, STEPS + 1))  # the resumed step 3 too
    rows = pd.read_parquet(skyrl_cpu_run.run_dir / "data" / "train.parquet")
    metrics: dict[int, dict] = {}  # a step's training and eval records, merged
    for r in RunDir(skyrl_cpu_run.run_dir).read_metrics():
        metrics.setdefault(r["step"], {}).update(r)
    with_probs = turns = 0
    for step in range(1, STEPS + 1):
        episodes = run.captures(step)
        groups = sorted({e.group for e in episodes})
        assert len(groups) == GROUPS and len(episodes) == GROUPS * GROUP_SIZE
        for group in groups:
            mine = [e for e in episodes if e.group == group]
            assert sorted(e.trajectory.sample for e in mine) == list(range(GROUP_SIZE))
            assert sum(e.advantage for e in mine) == pytest.approx(0.0, abs=1e-5)
            # the group is the training row the episodes played (SkyRL's uid)
            row = rows.iloc[group].to_dict()
            want = maze_from_extras(row).content_hash
            assert all(Maze.from_dict(e.trajectory.maze).content_hash == want for e in mine)
        for e in episodes:
            t = e.trajectory
            assert t.reward in (0.0, 1.0) and t.terminated == (t.reward == 1.0)
            assert t.turns and all(x.text is not None for x in t.turns)
            if t.terminated:  # SkyRL's reward and rlkit's replay agree
                assert t.turns[-1].pos_after == Maze.from_dict(t.maze).exit
            for x in t.turns:
                turns += 1
                # vLLM 0.32 serves the four words' logprobs: every tag gets its bars
                assert (x.move_probs is not None) == ("<action>" in x.text), x.text
                if x.move_probs is None:
                    continue
                with_probs += 1
                assert sum(x.move_probs) == pytest.approx(1.0, abs=1e-3)
                if len(x.actions) == 1:  # the move it took had some probability
                    assert x.move_probs[Action[x.actions[0].upper()]] > 0
        m = metrics[step]
        assert m["rollout/capture_episodes"] == len(episodes)
        assert m["rollout/capture_bytes"] == step_path(skyrl_cpu_run.run_dir, step).stat().st_size
        assert m["rollout/capture_probe_misses"] == sum(
            x.move_probs is None for e in episodes for x in e.trajectory.turns
        )
        assert m["rollout/capture_errors"] == 0
    # how many turns write a tag is the sampled trajectory's (the warm model's and vLLM's
    # kernels): the check above holds turn by turn; this one only that it was not vacuous
    assert with_probs > 0, f"none of {turns} turns opened an action tag"
