"""SkyRL's VLM generator with each observation's tokens taken where the render puts them.

SkyRL 0.4.0's `SkyRLVLMGymGenerator.agent_loop` re-renders the whole conversation every turn
and takes the turn's observation tokens as `render[len(previous render) + len(sampled ids):]`
(`skyrl_vlm_generator.py:146-153, 207`). That holds only while re-rendering reproduces the ids
the engine sampled. It often does not: a sampler draws `Ġ` `Ġ` where the tokenizer writes `ĠĠ`
(tests/skyrl/test_vllm_engine.py), or byte tokens whose text re-encodes otherwise. The slice
then starts inside the observation (or inside the answer), the trainer's sequence loses (or
gains) `<|image_pad|>` tokens while the pixel values are the render's, and the reference forward
raised "Image features and image tokens do not match, tokens: 159, features: 216" on a CPU run,
ending the run.

`RlkitVLMGenerator` fixes the root: an observation is the render's tail after the assistant's
end of turn, found by counting end-of-turn tokens back from the end (`observation_start`), so a
non-canonical answer keeps its sample whole: the answer's sampled ids (with their logprobs), then
the observation exactly as rendered. It runs SkyRL's own `agent_loop`, notes each turn at the
generator's hooks (`_render_conversation`, the engine client's `generate`, the env's step through
`_run_in_executor_if_available`) and then re-cuts each observation (`recut`). A last guard (`guard_placeholders`) covers what the root fix
cannot: a model that samples `<|image_pad|>` itself (SkyRL's client keeps it in the answer's
text, and vLLM then renders the later images with one pad each). Such a sample's image-pad runs
disagree with its image grids (what Qwen3-VL's forward checks, count and per-image runs); it
keeps only its prompt's images, its response's pads become padding, its loss mask is zeroed (no
gradient; its reward still counts in its group's baseline, as the episode really ended so), and
it is counted in the step's `generate/placeholder_desyncs` (`rollout/placeholder_desyncs`
through the bridge; `eval/all/generate/placeholder_desyncs` in an eval).

Measured against a real vLLM CPU server, the tiny model sampling its whole vocabulary (8 mazes x
2, 12 turns, 8 tokens an answer): SkyRL's generator left 2-3 of 16 samples whose forward fails as
on the run; this one none, its guard taking the 3-4 samples that had sampled `<|image_pad|>`.

At the same hooks it times each turn's phases (`PHASES`) and captures a few groups of every
training step (`capturer`, rlkit.cluster.skyrl.capture): their turns recorded as the loop plays
them, each with the engine's move probabilities, written to RUN/rollouts/ when the batch is done.

`RlkitExp.get_generator` (rlkit.cluster.skyrl.experiment) builds it; tests in
tests/skyrl/test_generator.py drive it with SkyRL's own config, dataset and generate().
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.generators.base import GeneratorOutput
from skyrl.train.generators.skyrl_gym_generator import TrajectoryOutput
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.utils.tok import get_processor

from rlkit.cluster.skyrl.capture import Capturer, StepCapture
from rlkit.cluster.skyrl.move_probe import EngineProbe
from rlkit.settings import CaptureConfig

IMAGE_PAD = "<|image_pad|>"
"""Qwen-VL's image placeholder: the forward puts one merged patch's feature at each."""
DESYNC_METRIC = "generate/placeholder_desyncs"
"""Samples of a generate() call whose placeholders had to be cut back to the prompt's images.
No avg/mean/min/max in the name: SkyRL sums such a key over concatenated outputs."""
PHASES = ("render", "engine", "env")
"""Where an episode's turns spend their time: the server's render of the conversation (the
chat template, the image processor, the features' round trip), the engine's generate call
(the router, the API server, the engine's queue and steps), the env's step in SkyRL's
executor. Summed over a generate() call's turns as `generate/seconds_<phase>`, with
`generate/timed_turns`; their ratio is a turn's mean latency in each."""


def observation_start(
    ids: list[int], n_messages: int, eos_id: int, answer_ended: bool
) -> int | None:
    """Where the last turn's observation starts in `ids`, the render of a conversation that ends
    with the assistant's answer, then `n_messages` observation messages and the generation prompt.

    Each rendered message closes with one end-of-turn token and the generation prompt has none,
    so the template's end of the answer's turn is the (n_messages + 1)-th from the end. As in
    SkyRL, sampled ids that end with an end-of-turn token (`answer_ended`) stand for the render's
    next one: the template's, where the answer's text left it out, or the answer's own right
    before it, where the text kept it (SkyRL's client decodes with special tokens, so the render
    shows `<|im_end|><|im_end|>`). The observation starts after that token. None if `ids` has
    too few end-of-turn tokens.
    """
    ends = [i for i, t in enumerate(ids) if t == eos_id]
    if len(ends) <= n_messages:
        return None
    end = ends[-(n_messages + 1)]
    return end + 1 if answer_ended and ids[end - 1] != eos_id else end


def image_runs(ids: list[int], image_id: int) -> list[int]:
    """Lengths of the runs of `image_id` in `ids`, in order: one per image for the forward
    (SkyRL marks image tokens by id; each run takes the next image grid)."""
    runs, n = [], 0
    for t in ids:
        if t == image_id:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return [*runs, n] if n else runs


def image_tokens(grid_thw, merge_size: int) -> list[int]:
    """Tokens per image of an `image_grid_thw` (N, 3): t*h*w patches, merge_size**2 per token."""
    return [] if grid_thw is None else [int(g.prod()) // merge_size**2 for g in grid_thw]


def guard_placeholders(out: GeneratorOutput, image_id: int, filler_id: int, merge_size: int) -> int:
    """Make every sample's image placeholders agree with its image grids, in place; returns how
    many samples had to be changed.

    A sample that disagrees keeps its prompt (the first render: its images are the first ones
    of the sample's grids), its response's image pads become `filler_id`, its pixel values and
    grids are cut to the prompt's images, and its loss mask is zeroed.
    """
    grids, pixels = out.get("image_grid_thw"), out.get("pixel_values")
    changed = 0
    for i, (prompt, response) in enumerate(
        zip(out["prompt_token_ids"], out["response_ids"], strict=True)
    ):
        grid = grids[i] if grids is not None else None
        if image_runs(prompt + response, image_id) == image_tokens(grid, merge_size):
            continue
        changed += 1
        out["response_ids"][i] = [filler_id if t == image_id else t for t in response]
        out["loss_masks"][i] = [0] * len(response)
        if grid is not None:
            kept = grid[: len(image_runs(prompt, image_id))]
            grids[i] = kept
            pixels[i] = pixels[i][: int(kept.prod(-1).sum())]
    return changed


@dataclass
class _Episode:
    """One trajectory's turns as SkyRL's `agent_loop` plays them, noted at its hooks."""

    renders: list[list[int]] = field(default_factory=list)
    """Each render's ids: the prompt's (SkyRL's setup), then each turn's input."""
    features: dict | None = None
    """The latest render's multimodal features."""
    sent: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)
    """The latest engine call's input and output."""
    answers: list[list[int]] = field(default_factory=list)
    """Each turn's sampled ids, with the eos SkyRL appends after a stop string."""
    observations: list[int] = field(default_factory=list)
    """Each turn's count of observation messages (0 when it ended the episode)."""


_EPISODE: ContextVar[_Episode | None] = ContextVar("rlkit_skyrl_episode", default=None)
"""The trajectory the running `agent_loop` plays (SkyRL gathers one task per trajectory)."""


def recut(out: TrajectoryOutput, episode: _Episode, eos_id: int) -> TrajectoryOutput:
    """SkyRL's trajectory with each observation taken from its render after the answer's end of
    turn (`observation_start`; SkyRL's offset where that finds none). SkyRL cut turn k's
    observation from the next render at `len(turn k's input) + len(turn k's sampled ids)`
    (`skyrl_vlm_generator.py:148, 207`); its answers keep their ids, masks, logprobs, rewards."""
    pieces: list[tuple[int, list[int] | None]] = []  # (SkyRL's length, new observation or None)
    for k, answer in enumerate(episode.answers):
        pieces.append((len(answer), None))
        if k + 2 < len(episode.renders):  # the next render flushed this turn's observation
            render, offset = episode.renders[k + 2], len(episode.renders[k + 1]) + len(answer)
            ended = bool(answer) and answer[-1] == eos_id
            start = observation_start(render, episode.observations[k], eos_id, ended)
            pieces.append((len(render[offset:]), render[offset if start is None else start :]))
    if sum(n for n, _ in pieces) != len(out.response_ids):
        raise RuntimeError("SkyRL's agent_loop no longer cuts its turns as rlkit's recut reads")

    def spliced(values: list, fill: float | None) -> list:
        """`values` with each observation's span replaced (by its ids, or `fill` per id)."""
        new, at = [], 0
        for n, observation in pieces:
            if observation is None:
                new += values[at : at + n]
            else:
                new += observation if fill is None else [fill] * len(observation)
            at += n
        return new

    lps = out.rollout_logprobs
    return replace(
        out,
        response_ids=spliced(out.response_ids, None),
        loss_mask=spliced(out.loss_mask, 0),
        reward=spliced(out.reward, 0.0),
        rollout_logprobs=None if lps is None else spliced(lps, 0.0),
    )


class _TappedClient:
    """An engine client whose `generate` calls are reported to `tap(input, output, started)`;
    everything else is the client's."""

    def __init__(self, client: Any, tap) -> None:
        self._client, self._tap = client, tap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def generate(self, engine_input: dict, **kwargs: Any) -> dict:
        since = time.monotonic()
        output = await self._client.generate(engine_input, **kwargs)
        self._tap(engine_input, output, since)
        return output


class RlkitVLMGenerator(SkyRLVLMGymGenerator):
    """`SkyRLVLMGymGenerator` whose samples' image placeholders always match their images.

    `merge_size`: the image processor's (Qwen3-VL: 2), to count tokens per image grid.
    `capturer`: the run's captured rollouts (None: none captured).
    """

    def __init__(
        self, *args: Any, merge_size: int, capturer: Capturer | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        # SkyRL's loop reads the engine only through this client: its answers are noted here
        self.inference_engine_client = _TappedClient(self.inference_engine_client, self._sampled)
        self.merge_size = merge_size
        self.capturer = capturer
        self._capture: StepCapture | None = None
        self.image_id = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if self.image_id is None or self.image_id == self.tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {IMAGE_PAD} token: not a Qwen-VL tokenizer")
        pad = self.tokenizer.pad_token_id
        self.filler_id = pad if pad is not None else self.tokenizer.eos_token_id
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._turns = 0

    def _timed(self, phase: str, since: float) -> None:
        self._seconds[phase] += time.monotonic() - since

    async def generate(self, input_batch, disable_tqdm: bool = False) -> GeneratorOutput:
        capture = self.capturer.begin(input_batch) if self.capturer is not None else None
        self._capture = capture  # agent loops of this call record their turns into it
        self._seconds, self._turns = dict.fromkeys(PHASES, 0.0), 0
        try:
            out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        finally:
            self._capture = None
        changed = guard_placeholders(out, self.image_id, self.filler_id, self.merge_size)
        out["rollout_metrics"][DESYNC_METRIC] = changed
        out["rollout_metrics"]["generate/timed_turns"] = self._turns
        for phase, seconds in self._seconds.items():
            out["rollout_metrics"][f"generate/seconds_{phase}"] = round(seconds, 3)
        if capture is not None:
            out["rollout_metrics"].update(await capture.finish(input_batch, out))
        return out

    async def agent_loop(self, *args: Any, **kwargs: Any) -> TrajectoryOutput:
        """SkyRL's own loop, its turns noted at the hooks below, then each observation re-cut
        where its render puts it (`recut`)."""
        episode = _Episode()
        token = _EPISODE.set(episode)
        try:
            out = await super().agent_loop(*args, **kwargs)
        finally:
            _EPISODE.reset(token)
        return recut(out, episode, self.tokenizer.eos_token_id)

    async def _render_conversation(self, conversation):
        since = time.monotonic()
        rendered = await super()._render_conversation(conversation)
        episode = _EPISODE.get()
        if episode is not None:
            if episode.renders:  # a turn's input (the first render is SkyRL's setup: untimed)
                self._timed("render", since)
            episode.renders.append(rendered["prompt_ids"])
            episode.features = rendered["features"]
        return rendered

    def _sampled(self, engine_input: dict, engine_output: dict, since: float) -> None:
        episode = _EPISODE.get()
        if episode is not None:
            self._timed("engine", since)
            self._turns += 1
            episode.sent, episode.sampled = engine_input, engine_output

    async def _run_in_executor_if_available(self, func, *args: Any, **kwargs: Any):
        episode = _EPISODE.get()
        if episode is None or getattr(func, "__name__", None) != "step":  # env.init, env.close
            return await super()._run_in_executor_if_available(func, *args, **kwargs)
        answer = episode.sampled["response_ids"][0]  # SkyRL has appended its eos to it by now
        episode.answers.append(answer)
        if self._capture is not None:  # a captured episode's turn (others: ignored)
            session, salt = episode.sent["session_ids"][0], episode.sent.get("cache_salt")
            self._capture.turn(
                session, args[0], episode.renders[-1], answer, episode.features, salt
            )
        since = time.monotonic()
        step = await super()._run_in_executor_if_available(func, *args, **kwargs)
        self._timed("env", since)
        episode.observations.append(0 if step["done"] else len(step["observations"]))
        return step


def build_generator(
    cfg, tokenizer, inference_engine_client, capture: CaptureConfig | None = None
) -> RlkitVLMGenerator:
    """What SkyRL's `BasePPOExp.get_generator` builds for a VLM run, as `RlkitVLMGenerator`;
    the merge size is the policy checkpoint's image processor's. `capture` (default: the
    presets' 2 groups, 50 steps) sets the captured training rollouts."""
    processor = get_processor(cfg.trainer.policy.model.path)
    model = resolve_policy_model_name(cfg)
    return RlkitVLMGenerator(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=inference_engine_client,
        tokenizer=tokenizer,
        policy_model_name=model,
        merge_size=processor.image_processor.merge_size,
        capturer=build_capturer(cfg, tokenizer, inference_engine_client, model, capture),
    )


def build_capturer(
    cfg, tokenizer, client, model: str | None, capture: CaptureConfig | None = None
) -> Capturer | None:
    """The run's `Capturer` (None when `capture.groups` is 0). Move probabilities need an
    HTTP engine: SkyRL's `RemoteInferenceClient` (its `get_endpoint_url()`, the router)."""
    settings = capture if capture is not None else CaptureConfig()
    if not settings.groups:
        return None
    url = client.get_endpoint_url() if hasattr(client, "get_endpoint_url") else None
    temperature = float(cfg.generator.sampling_params.temperature or 1.0)
    probe = None
    if url is not None:
        name = model or getattr(client, "model_name", None) or cfg.trainer.policy.model.path
        probe = EngineProbe(url, name, tokenizer, temperature)
    ends = tuple(t for t in (tokenizer.eos_token, tokenizer.pad_token) if isinstance(t, str) and t)
    return Capturer.from_config(cfg, settings, probe, end_markers=ends)
