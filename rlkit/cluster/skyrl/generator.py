"""SkyRL's VLM generator (`RlkitVLMGenerator`): each turn's prompt is the last one plus the answer
as sampled, never a re-render; under a history window every turn is a row of its own. Why,
measured: docs/skyrl-integration.md#the-generator-generatorpy-renderpy."""

from __future__ import annotations

import time
from dataclasses import replace
from http import HTTPStatus
from typing import Any
from uuid import uuid4

import aiohttp
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInput
from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.generators import skyrl_vlm_generator
from skyrl.train.generators.base import TRAINING_PHASE_TRAIN, GeneratorOutput
from skyrl.train.generators.skyrl_gym_generator import TrajectoryOutput
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.utils.tok import get_processor

from rlkit.cluster.skyrl.capture import Capturer, EngineProbe, StepCapture
from rlkit.cluster.skyrl.overrides import MM_CACHE_KWARG
from rlkit.cluster.skyrl.render import EpisodePrompt, TurnRenderer, runs
from rlkit.cluster.skyrl.window import WindowedLoop, last_steps
from rlkit.settings import CaptureConfig

IMAGE_PAD = "<|image_pad|>"
"""Qwen-VL's image placeholder: one merged patch's feature at each."""
DESYNC_METRIC = "generate/placeholder_desyncs"
"""Samples whose placeholders were cut back to the prompt's images (no avg/mean in the name:
SkyRL sums such a key over concatenated outputs)."""
RESEND_METRIC = "generate/image_resends"
"""Turns sent again with every picture's tensors (`RlkitVLMGenerator.engine_turn`)."""
PHASES = ("render", "engine", "env")
"""Where turns spend their time, logged as `generate/seconds_<phase>`."""


def image_runs(ids: list[int], image_id: int) -> list[int]:
    """Lengths of the runs of `image_id` in `ids`, in order: one per image for the forward."""
    return [end - start for start, end in runs(ids, image_id)]


def image_tokens(grid_thw, merge_size: int) -> list[int]:
    """Tokens per image of an `image_grid_thw` (N, 3): t*h*w patches, merge_size**2 per token."""
    return [] if grid_thw is None else [int(g.prod()) // merge_size**2 for g in grid_thw]


def guard_placeholders(out: GeneratorOutput, image_id: int, filler_id: int, merge_size: int) -> int:
    """Make every sample's image placeholders agree with its image grids, in place; returns how
    many changed (each keeps its prompt's images, its response's pads become `filler_id`, its
    loss mask zeroed)."""
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


class RlkitVLMGenerator(WindowedLoop, SkyRLVLMGymGenerator):
    """`SkyRLVLMGymGenerator` whose samples' image placeholders always match their images.
    `engine_keeps_images`: the engines' multimodal cache is on (pictures go by hash); `history`:
    a history window, each turn a row (None: one row an episode)."""

    def __init__(
        self,
        *args: Any,
        merge_size: int,
        capturer: Capturer | None = None,
        engine_keeps_images: bool = False,
        history: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if (history is not None) != bool(self.generator_cfg.step_wise_trajectories):
            raise ValueError(
                f"history ({history}) and generator.step_wise_trajectories "
                f"({self.generator_cfg.step_wise_trajectories}) go together: a window trains "
                "one row a turn (rlkit.cluster.skyrl.overrides sets both)"
            )
        self.history = history
        self._step_rows: dict[str, list[tuple]] = {}  # a window's rows: (pixels, grid, square)
        self.merge_size = merge_size
        self.engine_keeps_images = engine_keeps_images
        self.capturer = capturer
        self._capture: StepCapture | None = None
        self.image_id = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if self.image_id is None or self.image_id == self.tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {IMAGE_PAD} token: not a Qwen-VL tokenizer")
        pad = self.tokenizer.pad_token_id
        self.filler_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.renderer = TurnRenderer(
            self.inference_engine_client, self.tokenizer, self.image_id, self._decode
        )
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._turns = self._resends = 0

    def _validate_cfg(self, generator_cfg) -> None:
        """SkyRL's VLM checks, less its refusal of step-wise rows (`windowed_loop` builds them)."""
        super()._validate_cfg(replace(generator_cfg, step_wise_trajectories=False))

    @staticmethod
    def _decode(kwargs_data):  # looked up where SkyRL's loop looks it up: both decode alike
        return skyrl_vlm_generator.decode_mm_kwargs(kwargs_data)

    def _timed(self, phase: str, since: float) -> None:
        self._seconds[phase] += time.monotonic() - since

    async def generate(self, input_batch, disable_tqdm: bool = False) -> GeneratorOutput:
        capture = self.capturer.begin(input_batch) if self.capturer is not None else None
        self._capture = capture  # agent loops of this call record their turns into it
        self._seconds, self._turns, self._resends = dict.fromkeys(PHASES, 0.0), 0, 0
        self._step_rows = {}
        try:
            out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        finally:
            self._capture = None
        if self.history is not None:
            self.attach_step_rows(out)
        changed = guard_placeholders(out, self.image_id, self.filler_id, self.merge_size)
        metrics = out["rollout_metrics"]
        metrics[DESYNC_METRIC], metrics[RESEND_METRIC] = changed, self._resends
        metrics["generate/timed_turns"] = self._turns
        metrics.update({f"generate/seconds_{k}": round(v, 3) for k, v in self._seconds.items()})
        if capture is not None:
            episodes = out if self.history is None else last_steps(out)
            metrics.update(await capture.finish(input_batch, episodes))
        return out

    async def engine_turn(
        self, episode: EpisodePrompt, session_id: str, params: dict, cache_salt: str | None
    ) -> dict[str, Any]:
        """The engine's answer to `episode`'s prompt; with `engine_keeps_images` pictures it holds
        go by hash, and after an HTTP 500 (one dropped) the turn goes again whole, once, counted."""
        skip = self.engine_keeps_images and bool(episode.sent)
        try:
            out = await self._generate(
                episode.ids, episode.features(skip), session_id, params, cache_salt
            )
        except aiohttp.ClientResponseError as error:
            if not skip or error.status != HTTPStatus.INTERNAL_SERVER_ERROR:
                raise
            self._resends += 1
            out = await self._generate(
                episode.ids, episode.features(), session_id, params, cache_salt
            )
        episode.mark_sent()
        return out

    async def _generate(self, ids, features, session_id, params, cache_salt) -> dict[str, Any]:
        engine_input = InferenceEngineInput(
            prompt_token_ids=[ids],
            session_ids=[session_id],
            sampling_params=params,
            mm_features=[features] if features is not None else None,
            cache_salt=cache_salt,
        )
        return await self.inference_engine_client.generate(
            engine_input, model=self.policy_model_name
        )

    async def agent_loop(
        self,
        prompt,
        env_class: str,
        env_extras: dict[str, Any],
        max_tokens: int,
        max_input_length: int,
        sampling_params: dict[str, Any] | None = None,
        trajectory_id=None,
        cache_salt: str | None = None,
        training_phase=TRAINING_PHASE_TRAIN,
    ) -> TrajectoryOutput:
        """SkyRL 0.4.0's loop (`skyrl_vlm_generator.py:73-237`) with one change: each turn's prompt
        is the last prompt, the sampled ids and the observation, never a re-render."""
        start_time = time.monotonic()
        session_id = (
            f"{trajectory_id.instance_id}_{trajectory_id.repetition_id}"
            if trajectory_id is not None
            else uuid4().hex
        )
        if self.history is not None:
            return await self.windowed_loop(
                prompt,
                env_class,
                env_extras,
                max_input_length,
                sampling_params,
                session_id,
                cache_salt,
            )
        try:
            env, conversation, params = await self.start_env(
                prompt, env_class, env_extras, sampling_params
            )
            t = time.monotonic()
            episode = await self.renderer.start(conversation, session_id)
            self._timed("render", t)
            prompt_ids = episode.ids
            logprobs: list[float] | None = [] if params.get("logprobs") is not None else None
            response_ids: list[int] = []
            loss_mask: list[int] = []
            step_rewards: list[tuple[float, int]] = []
            stop_reason, done = "stop", False

            while not done:
                if len(episode.ids) > max_input_length:
                    stop_reason = "length"
                    break
                stop_reason, gen_ids, gen_logprobs, added_eos, step = await self.play_turn(
                    env, episode, conversation, session_id, params, cache_salt
                )
                done = step["done"]
                response_ids.extend(gen_ids)
                loss_mask.extend([1] * (len(gen_ids) - added_eos) + [0] * added_eos)
                if logprobs is not None:
                    logprobs.extend(gen_logprobs if gen_logprobs else [0.0] * len(gen_ids))
                if gen_ids:
                    step_rewards.append((step["reward"], len(response_ids) - 1))
                if not done:
                    conversation.extend(step["observations"])
                    t = time.monotonic()
                    obs_tokens = await self.renderer.extend(
                        episode, gen_ids, conversation, len(step["observations"]), session_id
                    )
                    self._timed("render", t)
                    response_ids.extend(obs_tokens)
                    loss_mask.extend([0] * len(obs_tokens))
                    if logprobs is not None:
                        logprobs.extend([0.0] * len(obs_tokens))

            reward = [0.0] * len(response_ids)
            for r, idx in step_rewards:
                reward[idx] = float(r)
            pixel_values, image_grid_thw = episode.pixels()
            env_metrics = env.get_metrics()
            await self._run_in_executor_if_available(env.close)
            return TrajectoryOutput(
                response_ids=response_ids,
                reward=reward,
                stop_reason=stop_reason,
                loss_mask=loss_mask,
                prompt_ids=prompt_ids,
                rollout_logprobs=logprobs,
                env_metrics=env_metrics,
                pixel_values=pixel_values,
                image_grid_thw=image_grid_thw,
                e2e_time=time.monotonic() - start_time,
            )
        finally:
            await self.inference_engine_client.finish_session(session_id)

    def _answer_of(self, engine_output: dict, params: dict) -> tuple[str, list, list | None, bool]:
        """(text, sampled ids, their logprobs, whether an end of turn was appended) of a turn."""
        text, ids = engine_output["responses"][0], engine_output["response_ids"][0]
        logprobs = engine_output.get("response_logprobs")
        logprobs = logprobs[0] if logprobs else None
        stops = params.get("stop")
        eos = self.tokenizer.eos_token_id
        added = (
            stops is not None
            and self.generator_cfg.append_eos_token_after_stop_str_in_multi_turn
            and text.endswith(tuple(stops))
            and ids[-1] != eos
        )
        if added:
            ids.append(eos)
            if logprobs is not None:
                logprobs.append(0.0)
        return text, ids, logprobs, added


def build_generator(
    cfg,
    tokenizer,
    inference_engine_client,
    capture: CaptureConfig | None = None,
    history: int | None = None,
) -> RlkitVLMGenerator:
    """What SkyRL's `get_generator` builds for a VLM run, as `RlkitVLMGenerator`."""
    processor = get_processor(cfg.trainer.policy.model.path)
    model = resolve_policy_model_name(cfg)
    engine_kwargs = cfg.generator.inference_engine.engine_init_kwargs or {}
    return RlkitVLMGenerator(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=inference_engine_client,
        tokenizer=tokenizer,
        policy_model_name=model,
        merge_size=processor.image_processor.merge_size,
        capturer=build_capturer(cfg, tokenizer, inference_engine_client, model, capture),
        engine_keeps_images=float(engine_kwargs.get(MM_CACHE_KWARG, 0) or 0) > 0,
        history=history,
    )


def build_capturer(
    cfg, tokenizer, client, model: str | None, capture: CaptureConfig | None = None
) -> Capturer | None:
    """The run's `Capturer` (None when `capture.groups` is 0); probes need an HTTP engine."""
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
