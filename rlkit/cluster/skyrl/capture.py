"""A few groups a step of a SkyRL run's training rollouts, captured into RUN/rollouts/ with each
turn's move probabilities asked of the run's engines (`EngineProbe`); a failure costs that step's
file, never the run: docs/skyrl-integration.md#captured-rollouts-and-move-probabilities-capturepy."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import aiohttp
import torch
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
    RemoteGenerateClient,
)
from skyrl.train.generators.base import TRAINING_PHASE_TRAIN

from rlkit.env.maze_env import maze_from_extras
from rlkit.episodes.policies import MoveProbs
from rlkit.maze.core import STOP
from rlkit.model.action_tag import ACTION_OPEN, move_choices, probe_point
from rlkit.model.vllm_policy import probs_of_moves
from rlkit.recipe import Recipe, check_capture
from rlkit.run.captures import CapturedEpisode, drop_after, pick_groups, training_label, write_step
from rlkit.run.skyrl_dumps import EvalEpisode, to_trajectory
from rlkit.settings import CaptureConfig
from rlkit.train.grpo import estimate

_log = logging.getLogger(__name__)

METRIC = "generate/capture_{}"
"""The step's capture costs (no avg/min/max in a name: SkyRL sums such keys over outputs)."""


@dataclass
class _Episode:
    texts: list[str] = field(default_factory=list)
    probes: list[asyncio.Task] = field(default_factory=list)


@dataclass
class Capturer:
    """A run's capture: what to keep, where, and the run's numbers it needs."""

    settings: CaptureConfig
    run_dir: str
    seed: int
    recipe: Recipe
    """Only `advantage_estimator` and `grpo_norm_by_std` are read."""
    probe: EngineProbe | None
    """None: no engine to ask; turns get no probabilities."""
    end_markers: tuple[str, ...] = ()
    """Chat scaffolding an answer may end with (not the model's words)."""
    _started: bool = field(default=False, repr=False)

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        settings: CaptureConfig,
        probe: EngineProbe | None,
        end_markers: tuple[str, ...] = (),
    ) -> Capturer:
        """The capture of SkyRL's `cfg`'s run; a UsageError for an estimator rlkit lacks."""
        algo = cfg.trainer.algorithm
        check_capture(settings.groups, algo.advantage_estimator)
        recipe = Recipe(
            advantage_estimator=algo.advantage_estimator, grpo_norm_by_std=algo.grpo_norm_by_std
        )
        t = cfg.trainer
        return cls(settings, t.ckpt_path, int(t.seed), recipe, probe, end_markers)

    def begin(self, input_batch: dict) -> StepCapture | None:
        """The capture of one generate() call, or None for an eval (or untagged) call."""
        meta = input_batch.get("batch_metadata")
        ids = input_batch.get("trajectory_ids")
        if not self.settings.groups or meta is None or ids is None:
            return None
        if meta.training_phase != TRAINING_PHASE_TRAIN:
            return None
        if not self._started:  # this attempt's first step: files past it are a killed one's
            self._started = True
            dropped = drop_after(self.run_dir, meta.global_step - 1)
            if dropped:
                _log.info(
                    "rlkit capture: resumed at step %d, dropped %s", meta.global_step, dropped
                )
        groups = [_group(t.instance_id, ids) for t in ids]
        picked = set(
            pick_groups(groups, self.settings.groups, seed=self.seed, step=meta.global_step)
        )
        rows = {
            t.to_string(): i
            for i, (t, g) in enumerate(zip(ids, groups, strict=True))
            if g in picked
        }
        return StepCapture(self, int(meta.global_step), rows, groups)


def _group(instance_id: str, ids: Sequence[Any]) -> int:
    """A group's number: its dataset row (SkyRL's uid), else where it first appears in `ids`."""
    if str(instance_id).isdigit():
        return int(instance_id)
    return next(i for i, t in enumerate(ids) if t.instance_id == instance_id)


class StepCapture:
    """One training step's captured groups while SkyRL's agent loops play them."""

    def __init__(self, owner: Capturer, step: int, rows: dict[str, int], groups: list[int]):
        self.owner, self.step, self.rows, self.groups = owner, step, rows, groups
        self.episodes: dict[str, _Episode] = {s: _Episode() for s in rows}
        self.probe_seconds = 0.0
        self.probe_failures = 0

    def turn(
        self,
        session_id: str,
        text: str,
        prompt_ids: list[int],
        answer_ids: list[int],
        features: dict | None,
        cache_salt: str | None,
    ) -> None:
        """Record a captured episode's turn (other sessions: ignored) and start its probe."""
        ep = self.episodes.get(session_id)
        if ep is None:
            return
        ep.texts.append(text)
        probe = self.owner.probe
        if probe is not None:
            args = (list(prompt_ids), list(answer_ids), features, session_id, cache_salt)
            ep.probes.append(asyncio.ensure_future(self._timed(probe.move_probs(*args))))

    async def _timed(self, probe) -> MoveProbs | None:
        start = time.perf_counter()
        try:
            return await probe
        except Exception as e:  # an observation aid: a failed probe costs its turn's bars only
            self.probe_failures += 1
            if self.probe_failures == 1:
                _log.warning("rlkit capture: a move-probability probe failed (%s)", e)
            return None
        finally:
            self.probe_seconds += time.perf_counter() - start

    async def finish(self, input_batch: dict, out: dict) -> dict[str, float]:
        """Write the step's file; the step's capture metrics."""
        start = time.perf_counter()
        probs = {
            s: await asyncio.gather(*ep.probes) if ep.probes else []
            for s, ep in self.episodes.items()
        }
        metrics = {"episodes": 0, "bytes": 0, "probe_misses": 0, "errors": 0}
        try:
            episodes = self._episodes(input_batch, out, probs)
            path = write_step(
                self.owner.run_dir, self.step, episodes, keep=self.owner.settings.keep
            )
            metrics["episodes"], metrics["bytes"] = len(episodes), path.stat().st_size
            metrics["probe_misses"] = sum(
                t.move_probs is None for e in episodes for t in e.trajectory.turns
            )
        except Exception as e:  # the run matters more than its sample: log, count, go on
            _log.warning("rlkit capture: step %d's rollouts were not written (%s)", self.step, e)
            metrics["errors"] = 1
        metrics["seconds"] = time.perf_counter() - start
        metrics["probe_seconds"] = self.probe_seconds
        return {METRIC.format(k): float(v) for k, v in metrics.items()}

    def _episodes(
        self, input_batch: dict, out: dict, probs: dict[str, list[MoveProbs | None]]
    ) -> list[CapturedEpisode]:
        order = sorted(self.rows.items(), key=lambda kv: kv[1])
        rewards = [_reward(out["rewards"][i]) for _, i in order]
        groups = [self.groups[i] for _, i in order]
        adv = estimate(torch.tensor(rewards), torch.tensor(groups), self.owner.recipe).tolist()
        episodes = []
        for (session, i), reward, group, a in zip(order, rewards, groups, adv, strict=True):
            ep = self._replayed(session, i, input_batch, out, reward, probs[session])
            episodes.append(CapturedEpisode(self.step, group, float(a), ep))
        return episodes

    def _replayed(self, session, i, input_batch, out, reward, probs):
        extras = input_batch["env_extras"][i]  # SkyRL's agent loop set its max_turns in place
        maze = maze_from_extras(extras)
        info = extras.get("extra_info") or {}
        ep = EvalEpisode(
            maze=maze.to_dict(),
            maze_index=int(info.get("index", -1)),
            maze_hash=maze.content_hash,
            data_source=str(extras.get("data_source") or "unknown"),
            reward=reward,
            solved=reward > 0,
            responses=[self._answer(t) for t in self.episodes[session].texts],
            stop_reason=out["stop_reasons"][i] if out.get("stop_reasons") else None,
            max_turns=extras.get("max_turns"),
            extras=dict(extras),
        )
        sample = input_batch["trajectory_ids"][i].repetition_id
        traj = to_trajectory(ep, sample, training_label(self.step))  # as the local trainer
        probs = [*probs, *[None] * (len(traj.turns) - len(probs))]  # no probe: no bars
        turns = [replace(t, move_probs=p) for t, p in zip(traj.turns, probs, strict=False)]
        return replace(traj, turns=turns, max_turns=ep.max_turns)

    def _answer(self, text: str) -> str:
        """The answer without the end-of-turn token SkyRL's client keeps."""
        for marker in self.owner.end_markers:
            while marker and text.endswith(marker):
                text = text[: -len(marker)]
        return text


def _reward(r: float | list[float]) -> float:
    """An episode's reward: SkyRL's VLM generator gives per-token rewards (their sum)."""
    return float(sum(r)) if isinstance(r, list) else float(r)


def chose_stop(text: str) -> bool:
    """Whether the answer's last `<action>` tag (the one the parsers obey) names `stop`."""
    at = text.rfind(ACTION_OPEN)
    return at >= 0 and text[at + len(ACTION_OPEN) :].lstrip().lower().startswith(STOP.word)


class Logprob(NamedTuple):
    """The shape `probs_of_moves` reads (vLLM's `Logprob`)."""

    logprob: float


def top_logprobs(raw_response: dict, temperature: float = 1.0) -> dict[int, Logprob]:
    """`{token id: logprob / temperature}` at the first position of vLLM's generate answer."""
    content = raw_response["choices"][0]["logprobs"]["content"][0]
    entries = [content, *content.get("top_logprobs", [])]
    return {int(e["token_id"]): Logprob(float(e["logprob"]) / temperature) for e in entries}


class EngineProbe:
    """A captured turn's move distribution: one 1-token request to the run's engines."""

    def __init__(self, url: str, model: str, tokenizer: Any, temperature: float = 1.0) -> None:
        self.client = RemoteGenerateClient(proxy_url=url)
        self.model, self.tokenizer, self.temperature = model, tokenizer, temperature
        self._choices: dict[str, tuple[int, ...] | None] = {}
        self.exact: bool | None = None
        """Whether the engine serves `logprob_token_ids` (None: not known yet)."""

    async def move_probs(
        self,
        prompt_ids: list[int],
        answer_ids: list[int],
        features: dict | None,
        session_id: str,
        cache_salt: str | None,
    ) -> MoveProbs | None:
        point = probe_point(self.tokenizer, answer_ids)
        if point is None or chose_stop(self.tokenizer.decode(list(answer_ids))):
            return None
        k, tail = point
        if tail not in self._choices:
            self._choices[tail] = move_choices(self.tokenizer, tail)
        choices = self._choices[tail]
        if choices is None:
            return None
        ask = {
            "prompt_token_ids": [*prompt_ids, *answer_ids[:k]],
            "session_id": session_id,
            "model": self.model,
            "mm_features": features,
            "cache_salt": cache_salt,
        }
        top = await self._exact(ask, choices) if self.exact is not False else None
        if top is None:  # vLLM's default max_logprobs, the most a request may ask
            top = await self._logprobs(ask, {"logprobs": 20})
        return probs_of_moves(top, list(choices))

    async def _exact(self, ask: dict, choices: tuple[int, ...]) -> dict[int, Logprob] | None:
        """The four words' logprobs (`logprob_token_ids`), or None from an engine that does not
        serve them (HTTP 4xx, or an answer without them)."""
        # vLLM lists the sampled token first and cuts the list at `logprobs` entries: the draw
        # must be one of the four, or one word falls off (raw logprobs ignore the mask)
        ids = list(choices)
        wanted = {"logprobs": len(ids), "logprob_token_ids": ids, "allowed_token_ids": ids}
        try:
            top = await self._logprobs(ask, wanted)
        except aiohttp.ClientResponseError as e:
            if not 400 <= e.status < 500 or self.exact:
                raise
            top = None
        if top is not None and all(c in top for c in choices):
            self.exact = True
            return top
        if self.exact is None:
            self.exact = False
            _log.info("rlkit capture: the engine gives no logprob_token_ids; asking for top 20")
        return None

    async def _logprobs(self, ask: dict, logprobs: dict) -> dict[int, Logprob]:
        params = {"max_tokens": 1, "temperature": 1.0, **logprobs}
        result = await self.client.generate(sampling_params=params, **ask)
        return top_logprobs(result.raw_response, self.temperature)

    async def aclose(self) -> None:
        await self.client.aclose()
