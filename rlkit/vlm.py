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
    """(n_patches, D) patches of each distinct image, once."""
    unique_grid_thw: torch.Tensor | None
    """(n_distinct, 3) patch grid per distinct image."""
    image_index: list[int]
    """For each image placeholder in batch order, its distinct image (episodes of one maze
    share most pictures: encoding each once cuts the vision tower's work several-fold)."""
    image_grid_thw: torch.Tensor | None
    """(n_images, 3) patch grid per image, batch order (multimodal rope positions)."""
    position_ids: torch.Tensor
    """(3, B, L) multimodal rope positions (time, height, width), 0 on padding, as the model's
    `get_rope_index` gives them for this batch."""
    response_ids: torch.Tensor
    """(B, R) response tokens, right-padded with 0."""
    response_mask: torch.Tensor
    """(B, R) 1 on real response tokens."""

    def model_inputs(self) -> dict:
        """Inputs as the HF processor would give them (every image's patches, batch order)."""
        kw = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
        }
        if self.pixel_values is not None:
            starts = np.cumsum([0, *self.unique_grid_thw.prod(1).tolist()])
            pv = torch.cat([self.pixel_values[starts[i] : starts[i + 1]] for i in self.image_index])
            kw |= {"pixel_values": pv, "image_grid_thw": self.image_grid_thw}
        return kw


def forward_hidden(loaded: LoadedModel, batch: Batch) -> torch.Tensor:
    """(B, L, H) last hidden states; the vision tower runs once per distinct image."""
    kw = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "mm_token_type_ids": batch.mm_token_type_ids,
    }
    if batch.pixel_values is not None:
        feats = loaded.model.model.get_image_features(
            batch.pixel_values, batch.unique_grid_thw, return_dict=True
        )
        idx = batch.image_index
        feats.pooler_output = tuple(feats.pooler_output[i] for i in idx)
        feats.deepstack_features = [tuple(f[i] for i in idx) for f in feats.deepstack_features]
        kw |= {"image_grid_thw": batch.image_grid_thw, "mm_encoder_outputs": {"image": feats}}
    return loaded.model.model(**kw, position_ids=batch.position_ids).last_hidden_state


def prompt_positions(loaded: LoadedModel, prompt: Encoded) -> np.ndarray:
    """(3, P) rope positions of one prompt, by the model's own `get_rope_index` (cached)."""
    grid = prompt.image_grid_thw
    key = (tuple(prompt.prompt_ids), grid.tobytes())
    hit = loaded.positions.get(key)
    if hit is None:
        ids = torch.tensor([prompt.prompt_ids])
        image_id = loaded.model.config.image_token_id
        pos, _ = loaded.model.model.get_rope_index(
            ids,
            (ids == image_id).int(),
            image_grid_thw=torch.from_numpy(grid) if len(grid) else None,
        )
        hit = loaded.positions.put(key, pos[:, 0].numpy())
    return hit


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
    pos = np.zeros((3, len(seqs), length), np.int64)
    for b, s in enumerate(seqs):
        ids[b, length - len(s) :] = s
        mask[b, length - len(s) :] = 1
        # response tokens are text: their positions continue from the prompt's last + 1
        p_pos = prompt_positions(loaded, prompts[b])
        n_resp = len(s) - p_pos.shape[1]
        pos[:, b, length - len(s) : length - n_resp] = p_pos
        pos[:, b, length - n_resp :] = p_pos.max() + 1 + np.arange(n_resp)
    r_len = max([len(r) for r in responses] + [1])
    resp = np.zeros((len(seqs), r_len), np.int64)
    resp_mask = np.zeros((len(seqs), r_len), np.int64)
    for b, r in enumerate(responses):
        resp[b, : len(r)] = r
        resp_mask[b, : len(r)] = 1
    dev = loaded.device
    image_id = loaded.model.config.image_token_id
    pv = unique_grid = grid = None
    slot: dict[int, int] = {}  # id(patch array) -> distinct index; the encoder reuses arrays
    distinct, index = [], []
    for p in prompts:
        for patches, g in p.images:
            if id(patches) not in slot:
                slot[id(patches)] = len(distinct)
                distinct.append((patches, g))
            index.append(slot[id(patches)])
    if distinct:
        dtype = loaded.model.dtype
        pv = torch.from_numpy(np.concatenate([p for p, _ in distinct])).to(dev, dtype)
        unique_grid = torch.from_numpy(np.stack([g for _, g in distinct])).to(dev)
        grid = unique_grid[index]
    ids_t = torch.from_numpy(ids).to(dev)
    return Batch(
        ids_t,
        torch.from_numpy(mask).to(dev),
        (ids_t == image_id).long(),
        pv,
        unique_grid,
        index,
        grid,
        torch.from_numpy(pos).to(dev),
        torch.from_numpy(resp).to(dev),
        torch.from_numpy(resp_mask).to(dev),
    )


def _logits_at(loaded: LoadedModel, batch: Batch, cols: torch.Tensor) -> torch.Tensor:
    """(B, K, V) next-token logits at columns `cols` (B, K): the LM head only where needed."""
    hidden = forward_hidden(loaded, batch)
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
