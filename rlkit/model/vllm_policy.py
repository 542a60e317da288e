"""vLLM as rlkit's own inference engine: a `Policy` answering maze turns through `vllm.LLM.chat`,
recording what `ModelPolicy` records: docs/models-and-engines.md#vllm-as-a-policy-modelvllm_policypy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.episodes.policies import MoveProbs, Response
from rlkit.errors import RlkitError, UsageError
from rlkit.maze import rules
from rlkit.maze.core import Action
from rlkit.maze.parsing import format_action
from rlkit.model.batching import VISION_TOKENS, AnswerSpec
from rlkit.model.policy import check_sampling, cut_at_stop
from rlkit.model.vllm_engine import VllmEngine, engine_limits, start_engine


class VllmPolicy:
    """A Qwen3-VL checkpoint answering maze turns through vLLM."""

    def __init__(
        self,
        engine: VllmEngine,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
        constrained: bool = True,
        max_new_tokens: int = 24,
    ) -> None:
        check_sampling(temperature, top_p, max_new_tokens)
        self.engine = engine
        self.temperature, self.top_p, self.greedy = temperature, top_p, greedy
        self.constrained, self.max_new_tokens = constrained, max_new_tokens
        self.answer = AnswerSpec.from_loaded(engine) if constrained else None
        # the same name as ModelPolicy's: results of either engine read alike
        self.name = f"{engine.path.name}{'' if constrained else ':free'}"

    def _params(self, seed: int, logprobs: int = 0, **kw: Any):
        from vllm import SamplingParams

        return SamplingParams(
            temperature=0.0 if self.greedy else self.temperature,
            top_p=1.0 if self.greedy else self.top_p,
            seed=None if self.greedy else seed,
            logprobs=logprobs,  # the top `logprobs` beside the sampled token's
            detokenize=False,  # decoded below with the checkpoint's tokenizer, as ModelPolicy
            **kw,
        )

    def act(
        self,
        states: Sequence[rules.State],
        messages: Sequence[list[dict]],
        rngs: Sequence[np.random.Generator],
    ) -> list[Response]:
        if len(messages) != len(rngs):
            raise UsageError(f"{len(messages)} conversations but {len(rngs)} random streams")
        # one draw per episode and turn, as ModelPolicy seeds its torch.Generator
        seeds = [int(r.integers(2**63)) for r in rngs]
        for m in messages:
            n = sum(
                part.get("type") in ("image_url", "image")
                for msg in m
                if not isinstance(msg["content"], str)
                for part in msg["content"]
            )
            if n > self.engine.max_images:
                raise UsageError(
                    f"a prompt holds {n} images but the vLLM engine was started for "
                    f"{self.engine.max_images}: start it with max_images >= {n} "
                    "(engine_limits(set, history) sizes it from the window and turn budget)"
                )
        if not messages:
            return []
        return (
            self._constrained(messages, seeds) if self.constrained else self._free(messages, seeds)
        )

    def _constrained(self, messages: Sequence[list[dict]], seeds: list[int]) -> list[Response]:
        ans, tok = self.answer, self.engine.tokenizer
        prefix = list(ans.prefix)
        opened = {"role": "assistant", "content": tok.decode(prefix)}
        choices = list(ans.choices)
        params = [
            self._params(s, logprobs=len(choices), max_tokens=1, allowed_token_ids=choices)
            for s in seeds
        ]
        outs = self.engine.llm.chat(
            [[*m, opened] for m in messages],
            params,
            use_tqdm=False,
            add_generation_prompt=False,
            continue_final_message=True,
        )
        out = []
        for o in outs:
            prompt, gen = list(o.prompt_token_ids), o.outputs[0]
            if prompt[-len(prefix) :] != prefix:
                raise RlkitError(
                    f"{self.engine.path.name}'s chat template did not end the prompt with the "
                    "answer prefix tokens: use constrained=False with this checkpoint"
                )
            k = ans.choices.index(gen.token_ids[0])
            ids = ans.response(k)
            lps = [0.0] * len(ids)
            lps[ans.choice_pos] = gen.logprobs[0][gen.token_ids[0]].logprob
            probs = probs_of_moves(gen.logprobs[0], choices)
            out.append(Response(format_action(Action(k)), prompt[: -len(prefix)], ids, lps, probs))
        return out

    def _free(self, messages: Sequence[list[dict]], seeds: list[int]) -> list[Response]:
        stops, tok = self.engine.stop_ids, self.engine.tokenizer
        params = [
            self._params(
                s,
                max_tokens=self.max_new_tokens,
                stop_token_ids=list(stops),
                bad_words=list(VISION_TOKENS),
            )
            for s in seeds
        ]
        outs = self.engine.llm.chat(list(messages), params, use_tqdm=False)
        out = []
        for o in outs:
            gen = o.outputs[0]
            ids = cut_at_stop(list(gen.token_ids), stops)
            lps = [gen.logprobs[i][t].logprob for i, t in enumerate(ids)]
            text = tok.decode(ids, skip_special_tokens=True)
            out.append(Response(text, list(o.prompt_token_ids), ids, lps))
        return out


def probs_of_moves(top: dict[int, Any], choices: list[int]) -> MoveProbs | None:
    """The four moves' probabilities from one position's top logprobs (`{token: Logprob}`),
    renormalised over the four; None if vLLM left one out."""
    if not all(c in top for c in choices):
        return None
    p = [math.exp(top[c].logprob) for c in choices]
    total = sum(p)
    if not total > 0:
        return None
    return (p[0] / total, p[1] / total, p[2] / total, p[3] / total)


def load_vllm_policy(
    path: str | Path,
    *,
    set_name: str = "test",
    history: int | None = 1,
    kv_cache_gb: float | None = None,
    **policy_kw: Any,
) -> VllmPolicy:
    """Start an engine sized for episodes on `set_name` with `history` and wrap it in a policy
    (keyword arguments go to `VllmPolicy`)."""
    engine = start_engine(path, **engine_limits(set_name, history), kv_cache_gb=kv_cache_gb)
    return VllmPolicy(engine, **policy_kw)


__all__ = ["VllmPolicy", "load_vllm_policy", "probs_of_moves"]
