"""The policy's move probabilities at a captured SkyRL turn, asked of the run's own engines
(`EngineProbe`): docs/skyrl-integration.md#captured-rollouts-and-move-probabilities-capturepy-move_probepy."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import aiohttp
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
    RemoteGenerateClient,
)

from rlkit.episodes.policies import MoveProbs
from rlkit.maze.core import STOP
from rlkit.model.action_tag import ACTION_OPEN, move_choices, probe_point
from rlkit.model.vllm_policy import probs_of_moves

_log = logging.getLogger(__name__)

TOP_LOGPROBS = 20
"""Top logprobs a probe asks an engine without `logprob_token_ids` for: vLLM's default
`max_logprobs`, the most a request may ask."""


def chose_stop(text: str) -> bool:
    """Whether the answer's last `<action>` tag (the one the parsers obey) names `stop`."""
    at = text.rfind(ACTION_OPEN)
    return at >= 0 and text[at + len(ACTION_OPEN) :].lstrip().lower().startswith(STOP.word)


class Logprob(NamedTuple):
    """The shape `probs_of_moves` reads a logprob in (vLLM's `Logprob.logprob`)."""

    logprob: float


def top_logprobs(raw_response: dict, temperature: float = 1.0) -> dict[int, Logprob]:
    """`{token id: logprob}` of the first generated position of vLLM's `/inference/v1/generate`
    answer (`choices[0].logprobs.content[0].top_logprobs`), divided by the temperature."""
    content = raw_response["choices"][0]["logprobs"]["content"][0]
    entries = [content, *content.get("top_logprobs", [])]
    return {int(e["token_id"]): Logprob(float(e["logprob"]) / temperature) for e in entries}


class EngineProbe:
    """The move distribution at a captured turn's move position: one 1-token request to the
    run's engines (the router behind SkyRL's client, `get_endpoint_url()`)."""

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
        if top is None:
            top = await self._logprobs(ask, {"logprobs": TOP_LOGPROBS})
        return probs_of_moves(top, list(choices))

    async def _exact(self, ask: dict, choices: tuple[int, ...]) -> dict[int, Logprob] | None:
        """The four words' logprobs (`logprob_token_ids`), or None once the engine has shown it
        does not serve them (HTTP 4xx, or an answer without them)."""
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
        """Close the HTTP session of the running event loop."""
        await self.client.aclose()
