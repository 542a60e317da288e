"""The model policy: a Qwen3-VL checkpoint answering maze turns, batched (and `load_policy`):
docs/models-and-engines.md#the-model-policy-modelpolicypy."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from rlkit.episodes.policies import MoveProbs, Policy, Response, is_scripted, scripted_policy
from rlkit.errors import UsageError
from rlkit.maze import rules
from rlkit.maze.parsing import format_action
from rlkit.model.action_tag import move_choices, probe_point
from rlkit.model.batching import AnswerSpec, banned_ids, build_batch, choice_logits, mask_banned
from rlkit.model.chat import Encoded
from rlkit.model.load import LoadedModel, load


def sample_rows(
    logits: torch.Tensor,
    generators: Sequence[torch.Generator],
    *,
    temperature: float,
    top_p: float,
    greedy: bool,
) -> torch.Tensor:
    """(B,) one token per row of (B, V) logits, row b drawn with `generators[b]`."""
    if greedy:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p  # keep the smallest set reaching top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
    probs = probs.cpu()
    return torch.stack(
        [torch.multinomial(probs[b], 1, generator=g)[0] for b, g in enumerate(generators)]
    ).to(logits.device)


@dataclass
class _RowSampler(LogitsProcessor):
    """Makes `generate`'s greedy step pick the token each row's own seeded generator draws."""

    generators: Sequence[torch.Generator]
    temperature: float
    top_p: float
    greedy: bool
    banned: list[int]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        scores = mask_banned(scores, self.banned)
        tokens = sample_rows(
            scores,
            self.generators,
            temperature=self.temperature,
            top_p=self.top_p,
            greedy=self.greedy,
        )
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(-1, tokens.unsqueeze(-1), 0.0)


def check_sampling(temperature: float, top_p: float, max_new_tokens: int) -> None:
    """One-line errors for sampling settings either engine would misread."""
    if not temperature > 0:
        raise UsageError(f"temperature ({temperature}) must be > 0; use greedy=True for argmax")
    if not 0 < top_p <= 1:
        raise UsageError(f"top_p ({top_p}) must be in (0, 1]")
    if max_new_tokens < 1:
        raise UsageError(f"max_new_tokens ({max_new_tokens}) must be >= 1")


class ModelPolicy:
    """A Qwen3-VL checkpoint answering maze turns, constrained or free."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        greedy: bool = False,
        constrained: bool = True,
        max_new_tokens: int = 24,
        max_batch: int = 512,
    ) -> None:
        check_sampling(temperature, top_p, max_new_tokens)
        if max_batch < 1:
            raise UsageError(f"max_batch ({max_batch}) must be >= 1")
        self.loaded = loaded
        self.temperature, self.top_p, self.greedy = temperature, top_p, greedy
        self.constrained, self.max_new_tokens = constrained, max_new_tokens
        self.max_batch = max_batch
        self.answer = AnswerSpec.from_loaded(loaded) if constrained else None
        """The cell game's constrained answer; `answer_for` gives each game's."""
        self._answers: dict[str, AnswerSpec] = {} if self.answer is None else {"cells": self.answer}
        self._choices: dict[str, tuple[int, ...] | None] = {}  # `move_choices` per partial tag
        self.name = f"{Path(loaded.path).name}{'' if constrained else ':free'}"

    def act(
        self,
        states: Sequence[rules.State],
        messages: Sequence[list[dict]],
        rngs: Sequence[np.random.Generator],
    ) -> list[Response]:
        if len(messages) != len(rngs):
            raise UsageError(f"{len(messages)} conversations but {len(rngs)} random streams")
        gens = [torch.Generator().manual_seed(int(r.integers(2**63))) for r in rngs]
        encoded = [self.loaded.encoder.encode(m) for m in messages]
        if not self.constrained:
            return self._batched(self._generate, encoded, gens)
        out: dict[int, Response] = {}
        for game in dict.fromkeys(s.maze.game for s in states):  # one spec per game, in order
            rows = [i for i, s in enumerate(states) if s.maze.game == game]
            step = partial(self._constrained, ans=self.answer_for(game))
            answers = self._batched(step, [encoded[i] for i in rows], [gens[i] for i in rows])
            out.update(zip(rows, answers, strict=True))
        return [out[i] for i in range(len(encoded))]

    def answer_for(self, game: str) -> AnswerSpec:
        """The constrained answer of `game`: four move words (cells), plus `stop` (squares)."""
        if game not in self._answers:
            self._answers[game] = AnswerSpec.from_loaded(self.loaded, game)
        return self._answers[game]

    def _batched(self, step, encoded: list[Encoded], gens: list[torch.Generator]) -> list[Response]:
        out: list[Response] = []
        with torch.no_grad():
            for lo in range(0, len(encoded), self.max_batch):
                hi = lo + self.max_batch
                out += step(encoded[lo:hi], gens[lo:hi])
        return out

    def _constrained(
        self, encoded: list[Encoded], gens: list[torch.Generator], ans: AnswerSpec
    ) -> list[Response]:
        logits = choice_logits(self.loaded, encoded, ans) / self.temperature
        picks = sample_rows(logits, gens, temperature=1.0, top_p=self.top_p, greedy=self.greedy)
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, picks.unsqueeze(-1)).squeeze(-1).tolist()
        out = []
        for e, k, lp, p in zip(
            encoded, picks.tolist(), logp, logp_all.float().exp().tolist(), strict=True
        ):
            ids = ans.response(k)
            lps = [0.0] * len(ids)
            lps[ans.choice_pos] = lp
            # move probabilities are the four-move contract: none where `stop` is a fifth
            probs = _four(p) if len(ans.moves) == 4 else None
            out.append(Response(format_action(ans.moves[k]), list(e.prompt_ids), ids, lps, probs))
        return out

    def _generate(self, encoded: list[Encoded], gens: list[torch.Generator]) -> list[Response]:
        lm = self.loaded
        batch = build_batch(lm, encoded)
        banned = banned_ids(lm)
        sampler = _RowSampler(gens, self.temperature, self.top_p, self.greedy, banned)
        with neutral_generation_config(lm.model):
            gen = lm.model.generate(
                **batch.model_inputs(),
                generation_config=GenerationConfig(
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    eos_token_id=list(lm.stop_ids),
                    pad_token_id=lm.pad_id,
                    output_logits=True,
                    return_dict_in_generate=True,
                ),
                logits_processor=LogitsProcessorList([sampler]),
            )
        new = gen.sequences[:, batch.input_ids.shape[1] :]
        raw = mask_banned(torch.stack(gen.logits, 1).float(), banned) / self.temperature
        logp = torch.log_softmax(raw, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        out = []
        for b, e in enumerate(encoded):
            ids = cut_at_stop(new[b].tolist(), lm.stop_ids)
            text = lm.tokenizer.decode(ids, skip_special_tokens=True)
            probs = self._free_move_probs(ids, raw[b])
            out.append(Response(text, list(e.prompt_ids), ids, logp[b, : len(ids)].tolist(), probs))
        return out

    def _free_move_probs(self, ids: list[int], logits: torch.Tensor) -> MoveProbs | None:
        """The four moves' odds where `ids` last opens `<action>` ((R, V) masked `logits` at
        temperature); None without a tag or four distinct move tokens there."""
        tok = self.loaded.tokenizer
        point = probe_point(tok, ids)
        if point is None or point[0] >= len(ids):
            return None
        k, tail = point
        if tail not in self._choices:
            self._choices[tail] = move_choices(tok, tail)
        choices = self._choices[tail]
        if choices is None:
            return None
        return _four(torch.softmax(logits[k, list(choices)], -1).tolist())


def cut_at_stop(ids: list[int], stops: Sequence[int]) -> list[int]:
    """`ids` up to and including the first stop id (`generate` pads rows that stopped early)."""
    return next((ids[: i + 1] for i, t in enumerate(ids) if t in stops), ids)


@contextmanager
def neutral_generation_config(model: torch.nn.Module) -> Iterator[None]:
    """For the call, a blank generation config: no checkpoint sampling default (8B: top_k 20)."""
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


def _four(p: Sequence[float]) -> MoveProbs:
    return (p[0], p[1], p[2], p[3])


def load_policy(name_or_path: str | Path, **kw) -> Policy:
    """A scripted policy (`random`, `oracle`, `eps-oracle:E`) or a `ModelPolicy` for a model dir
    (`device` and `dtype` go to `load`, other keywords to `ModelPolicy`)."""
    name = str(name_or_path)
    if is_scripted(name):
        if kw:
            raise UsageError(f"scripted policy {name!r} takes no options (got {sorted(kw)})")
        return scripted_policy(name)
    if not Path(name).is_dir():
        raise UsageError(
            f"unknown policy {name!r}: use random, oracle, eps-oracle:E or a model directory"
        )
    device, dtype = kw.pop("device", "cpu"), kw.pop("dtype", None)
    return ModelPolicy(load(name, device=device, dtype=dtype), **kw)
