"""The model policy, and the batch/logprob functions sampling and training share.

`ModelPolicy.act` answers all live episodes with one batched model call per turn:

- constrained (default): one forward pass over prompt + `<action>`, the next token drawn only
  among the four move-word tokens; the answer is `<action>WORD</action><|im_end|>`.
- free: one `generate` call (left padding, KV cache) up to `max_new_tokens`, stopping at
  `<|im_end|>`; whatever the model writes goes to the env's parser (parse errors are the env's
  business: feedback, no exception).

Log-probabilities (recorded at sampling time and recomputed by `response_logprobs`, with the
same definition in both places, so the RL ratio is exactly 1 on un-updated weights):

- free: log softmax(logits / temperature) over the vocabulary minus the vision placeholder
  tokens (`VISION_TOKENS`: an image pad in a response would claim image features that don't
  exist), for every response token.
  top-p changes which token is drawn but not the recorded value (as SkyRL's trainer recomputes
  with temperature only), so keep top_p = 1 for on-policy RL.
- constrained: the policy is a distribution over the four move words; the forced tokens
  (`<action>`, `</action>`, `<|im_end|>`, the tail of a multi-token word) have probability 1
  under it, so logprob 0 and entropy 0; the move-word token has log softmax(logits / T)
  restricted to the four move-word tokens.

Sampling uses one `torch.Generator` per episode, seeded from that episode's numpy stream, so an
episode's answers do not depend on which other episodes share its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from rlkit import rules
from rlkit.errors import UsageError
from rlkit.maze import Action
from rlkit.models import Encoded, LoadedModel, load
from rlkit.parsing import format_action
from rlkit.policies import Policy, Response, is_scripted, scripted_policy

VISION_TOKENS = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""Never generated: the free-generation distribution excludes them (sampling and training)."""


def banned_ids(loaded: LoadedModel) -> list[int]:
    tok = loaded.tokenizer
    ids = [tok.convert_tokens_to_ids(t) for t in VISION_TOKENS]
    return sorted({i for i in ids if i is not None and i != tok.unk_token_id})


def _mask_banned(logits: torch.Tensor, banned: list[int]) -> torch.Tensor:
    return logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))


@dataclass(frozen=True)
class AnswerSpec:
    """The constrained answer's tokens: forced prefix, one choice token, forced tail per word."""

    prefix: tuple[int, ...]
    choices: tuple[int, ...]
    """First token of each move word, in `Action` order (they must differ)."""
    tails: tuple[tuple[int, ...], ...]
    """The rest of each answer after its choice token, ending with the end-of-turn token."""

    @classmethod
    def from_loaded(cls, loaded: LoadedModel) -> AnswerSpec:
        tok = loaded.tokenizer

        def ids(text: str) -> tuple[int, ...]:
            return tuple(tok(text, add_special_tokens=False)["input_ids"])

        prefix, suffix = ids("<action>"), (*ids("</action>"), loaded.eos_id)
        words = [ids(a.word) for a in Action]
        choices = tuple(w[0] for w in words)
        if len(set(choices)) != len(choices):
            raise UsageError(
                "move words share a first token in this tokenizer: use constrained=False"
            )
        return cls(prefix, choices, tuple((*w[1:], *suffix) for w in words))

    @property
    def choice_pos(self) -> int:
        """Index of the choice token within the response."""
        return len(self.prefix)

    def response(self, action: int) -> list[int]:
        return [*self.prefix, self.choices[action], *self.tails[action]]


@dataclass
class Batch:
    """Prompts (+ responses) left-padded into one model input."""

    input_ids: torch.Tensor
    """(B, L) token ids, left-padded."""
    attention_mask: torch.Tensor
    """(B, L) 1 on real tokens."""
    mm_token_type_ids: torch.Tensor
    """(B, L) 1 on image tokens: Qwen3-VL's multimodal rope needs it."""
    pixel_values: torch.Tensor | None
    """(n_patches, D) every image's patches, batch order."""
    image_grid_thw: torch.Tensor | None
    """(n_images, 3) patch grid per image."""
    response_ids: torch.Tensor
    """(B, R) response tokens, right-padded with 0."""
    response_mask: torch.Tensor
    """(B, R) 1 on real response tokens."""

    def model_inputs(self) -> dict:
        kw = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
        }
        if self.pixel_values is not None:
            kw |= {"pixel_values": self.pixel_values, "image_grid_thw": self.image_grid_thw}
        return kw


def build_batch(
    loaded: LoadedModel,
    prompts: Sequence[Encoded],
    responses: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """Left-pad prompt + response ids into one batch on the model's device.

    With left padding every row's last token sits at column L-1, so one index reads the next-
    token logits for all rows (sampling), and response token j of row b sits at L - R_b + j.
    """
    responses = responses if responses is not None else [[] for _ in prompts]
    if len(responses) != len(prompts):
        raise UsageError(f"{len(prompts)} prompts but {len(responses)} responses")
    seqs = [list(p.prompt_ids) + list(r) for p, r in zip(prompts, responses, strict=True)]
    length = max(len(s) for s in seqs)
    ids = np.full((len(seqs), length), loaded.pad_id, np.int64)
    mask = np.zeros((len(seqs), length), np.int64)
    for b, s in enumerate(seqs):
        ids[b, length - len(s) :] = s
        mask[b, length - len(s) :] = 1
    r_len = max([len(r) for r in responses] + [1])
    resp = np.zeros((len(seqs), r_len), np.int64)
    resp_mask = np.zeros((len(seqs), r_len), np.int64)
    for b, r in enumerate(responses):
        resp[b, : len(r)] = r
        resp_mask[b, : len(r)] = 1
    dev = loaded.device
    image_id = loaded.model.config.image_token_id
    pv = grid = None
    if any(len(p.image_grid_thw) for p in prompts):
        dtype = loaded.model.dtype
        pv = torch.from_numpy(np.concatenate([p.pixel_values for p in prompts])).to(dev, dtype)
        grid = torch.from_numpy(np.concatenate([p.image_grid_thw for p in prompts])).to(dev)
    ids_t = torch.from_numpy(ids).to(dev)
    return Batch(
        ids_t,
        torch.from_numpy(mask).to(dev),
        (ids_t == image_id).long(),
        pv,
        grid,
        torch.from_numpy(resp).to(dev),
        torch.from_numpy(resp_mask).to(dev),
    )


def _logits_at(loaded: LoadedModel, batch: Batch, cols: torch.Tensor) -> torch.Tensor:
    """(B, K, V) next-token logits at columns `cols` (B, K): the LM head only where needed."""
    hidden = loaded.model.model(**batch.model_inputs()).last_hidden_state
    picked = hidden.gather(1, cols.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
    return loaded.model.lm_head(picked).float()


def response_logprobs(
    loaded: LoadedModel,
    batch: Batch,
    *,
    temperature: float = 1.0,
    answer: AnswerSpec | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (logprobs, entropy), each (B, R), of `batch.response_ids` (0 where masked).

    Differentiable (call under `torch.no_grad()` when only evaluating). `answer` selects the
    constrained definition (see the module docstring); it must match how the tokens were drawn.
    """
    b, r = batch.response_ids.shape
    length = batch.input_ids.shape[1]
    r_lens = batch.response_mask.sum(1, keepdim=True)
    j = torch.arange(r, device=batch.input_ids.device).unsqueeze(0)
    cols = (length - r_lens - 1 + j).clamp(0, length - 1)
    logits = _logits_at(loaded, batch, cols) / temperature
    mask = batch.response_mask.bool()
    if answer is None:
        logp_all = torch.log_softmax(_mask_banned(logits, banned_ids(loaded)), -1)
        logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all.nan_to_num(neginf=0.0)).sum(-1)
        return logp.masked_fill(~mask, 0.0), entropy.masked_fill(~mask, 0.0)
    pos = answer.choice_pos
    choices = torch.tensor(answer.choices, device=logits.device)
    chosen = batch.response_ids[:, pos]
    which = (chosen.unsqueeze(-1) == choices).float().argmax(-1)
    if not bool((chosen.unsqueeze(-1) == choices).any(-1).all()):
        raise UsageError("a response's choice token is not a move word: pass answer=None")
    logp_c = torch.log_softmax(logits[:, pos, choices], -1)
    logp = torch.zeros(b, r, device=logits.device, dtype=logits.dtype)
    entropy = torch.zeros_like(logp)
    logp[:, pos] = logp_c.gather(-1, which.unsqueeze(-1)).squeeze(-1)
    entropy[:, pos] = -(logp_c.exp() * logp_c).sum(-1)
    return logp, entropy


def _top_p_probs(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, -1)
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p >= top_p  # keep the smallest set reaching top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


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
    probs = _top_p_probs(logits.float() / temperature, top_p).cpu()
    return torch.stack(
        [torch.multinomial(probs[b], 1, generator=g)[0] for b, g in enumerate(generators)]
    ).to(logits.device)


class _RowSampler(LogitsProcessor):
    """Makes `generate`'s greedy step pick our per-row sampled token (a seeded generator per
    episode; `generate` itself has no per-row randomness)."""

    def __init__(self, generators, temperature: float, top_p: float, greedy: bool, banned) -> None:
        self.generators, self.kw = generators, {"temperature": temperature, "top_p": top_p}
        self.greedy, self.banned = greedy, banned

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        scores = _mask_banned(scores, self.banned)
        tokens = sample_rows(scores, self.generators, greedy=self.greedy, **self.kw)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(-1, tokens.unsqueeze(-1), 0.0)


class ModelPolicy:
    """A Qwen3-VL checkpoint answering maze turns (see the module docstring for the modes)."""

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
        if not temperature > 0:
            raise UsageError(f"temperature ({temperature}) must be > 0; use greedy=True for argmax")
        if not 0 < top_p <= 1:
            raise UsageError(f"top_p ({top_p}) must be in (0, 1]")
        if max_new_tokens < 1 or max_batch < 1:
            raise UsageError("max_new_tokens and max_batch must be >= 1")
        self.loaded = loaded
        self.temperature, self.top_p, self.greedy = temperature, top_p, greedy
        self.constrained, self.max_new_tokens, self.max_batch = (
            constrained,
            max_new_tokens,
            max_batch,
        )
        self.answer = AnswerSpec.from_loaded(loaded) if constrained else None
        self.name = f"{Path(loaded.path).name}{'' if constrained else ':free'}"

    def act(
        self,
        states: Sequence[rules.State],
        messages: Sequence[list[dict]],
        rngs: Sequence[np.random.Generator],
    ) -> list[Response]:
        if not len(messages) == len(rngs):
            raise UsageError(f"{len(messages)} conversations but {len(rngs)} random streams")
        gens = [torch.Generator().manual_seed(int(r.integers(2**63))) for r in rngs]
        encoded = [self.loaded.encoder.encode(m) for m in messages]
        out: list[Response] = []
        step = self._constrained if self.constrained else self._generate
        with torch.no_grad():
            for lo in range(0, len(encoded), self.max_batch):
                hi = lo + self.max_batch
                out += step(encoded[lo:hi], gens[lo:hi])
        return out

    def _constrained(self, encoded: list[Encoded], gens: list[torch.Generator]) -> list[Response]:
        ans = self.answer
        batch = build_batch(self.loaded, encoded, [ans.prefix] * len(encoded))
        last = torch.full(
            (len(encoded), 1), batch.input_ids.shape[1] - 1, device=batch.input_ids.device
        )
        logits = _logits_at(self.loaded, batch, last)[:, 0, list(ans.choices)] / self.temperature
        picks = sample_rows(logits, gens, temperature=1.0, top_p=self.top_p, greedy=self.greedy)
        logp = torch.log_softmax(logits, -1).gather(-1, picks.unsqueeze(-1)).squeeze(-1).tolist()
        out = []
        for e, k, lp in zip(encoded, picks.tolist(), logp, strict=True):
            ids = ans.response(k)
            lps = [0.0] * len(ids)
            lps[ans.choice_pos] = lp
            out.append(Response(format_action(Action(k)), list(e.prompt_ids), ids, lps))
        return out

    def _generate(self, encoded: list[Encoded], gens: list[torch.Generator]) -> list[Response]:
        lm = self.loaded
        batch = build_batch(lm, encoded)
        banned = banned_ids(lm)
        sampler = _RowSampler(gens, self.temperature, self.top_p, self.greedy, banned)
        gen = lm.model.generate(
            **batch.model_inputs(),
            # a fresh config: a checkpoint's own sampling defaults (8B: top_k 20...) must not apply
            generation_config=GenerationConfig(
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                eos_token_id=lm.eos_id,
                pad_token_id=lm.pad_id,
                output_logits=True,
                return_dict_in_generate=True,
            ),
            logits_processor=LogitsProcessorList([sampler]),
        )
        new = gen.sequences[:, batch.input_ids.shape[1] :]
        raw = _mask_banned(torch.stack(gen.logits, 1).float(), banned) / self.temperature
        logp = torch.log_softmax(raw, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        out = []
        for b, e in enumerate(encoded):
            ids = new[b].tolist()
            if lm.eos_id in ids:
                ids = ids[: ids.index(lm.eos_id) + 1]
            text = lm.tokenizer.decode(ids, skip_special_tokens=True)
            out.append(Response(text, list(e.prompt_ids), ids, logp[b, : len(ids)].tolist()))
        return out


def load_policy(name_or_path: str | Path, **kw) -> Policy:
    """A scripted policy (`random`, `oracle`, `eps-oracle:E`) or a `ModelPolicy` for a model dir.

    Keyword arguments go to `ModelPolicy` (plus `device`, `dtype` for `load`); scripted policies
    take none.
    """
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
