"""vLLM as rlkit's own inference engine: a `Policy` answering maze turns through `vllm.LLM.chat`.

    engine = start_engine("runs/demo/global_step_40/policy", **engine_limits("test", history=1))
    policy = VllmPolicy(engine, greedy=True)        # the Policy protocol, like ModelPolicy
    result, trajs = evaluate(policy, set_name="test")

    rlkit eval --policy runs/demo/global_step_40/policy --engine vllm --samples 4 --json

It answers as `rlkit.model.policy.ModelPolicy` does, from the env's own messages (`image_url`
data URIs, the history window `run_episodes` cuts), one `chat` call per turn for all live
episodes:

- constrained (default): the conversation continued with `<action>` (an assistant message and
  `continue_final_message`), one token drawn only among the four move-word tokens
  (`allowed_token_ids`, `max_tokens=1`); the response is the same token ids ModelPolicy
  records. Guided choice over the four answer strings runs on CPU too, but is another policy
  (it walks the answer token by token: 14 of 64 greedy first moves differed) and 2.3x slower.
- free: up to `max_new_tokens`, stopping at any of the checkpoint's stop ids (`<|im_end|>` and
  the generation config's eos ids: Qwen's `<|endoftext|>` too), the vision tokens banned
  (`bad_words`) as rlkit's free distribution bans them, and the output rows with no token
  (the engine's `NoTokenRows`); text decoded with the checkpoint's tokenizer as ModelPolicy
  decodes it.

Logprobs: the engine runs with `logprobs_mode="processed_logprobs"`, so the recorded value is
the sampled token's log-probability after the masks and the temperature: rlkit's definitions
(`rlkit.model.batching`) at `top_p = 1`. With `top_p < 1` vLLM renormalises over the nucleus,
where rlkit records the pre-top-p value (keep top_p = 1 for on-policy RL either way).

Move probabilities (`Response.move_probs`): constrained, each request asks for the top 4
processed logprobs of its one token; with `allowed_token_ids` those are the four move words
(every other token is masked to -inf), so their exponentials, renormalised over the four, are
the softmax over the four moves' logits at the answer position, as ModelPolicy records (at the
sampling temperature; greedy requests run at temperature 0, where vLLM applies none, i.e. 1).
Four logprobs of an already computed row cost next to nothing. Free answers record none: the
moves' logprobs at the `<action>` position would need the whole vocabulary's top-k there.

Seeds: every request carries `SamplingParams(seed=...)` drawn from its episode's numpy stream,
as ModelPolicy seeds a `torch.Generator` per episode, so a run is reproducible and an episode's
draws do not depend on which episodes share its batch. Greedy decoding uses temperature 0.
The two engines draw with different samplers (vLLM: exponential race; HF: multinomial), so
sampled episodes agree in distribution, greedy ones token for token.

The engine (`start_engine`, `engine_limits`: in this process, sized for the set's images) is
`rlkit.model.vllm_engine`.
"""

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
from rlkit.model.policy import check_sampling
from rlkit.model.vllm_engine import VllmEngine, engine_limits, start_engine


class VllmPolicy:
    """A Qwen3-VL checkpoint answering maze turns through vLLM (see the module docstring)."""

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
            ids = list(gen.token_ids)
            end = next((i for i, t in enumerate(ids) if t in stops), None)
            if end is not None:
                ids = ids[: end + 1]
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
