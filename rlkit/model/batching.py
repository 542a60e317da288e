"""Model batches shared by sampling and training: padding, the forward pass, logprobs, each
distinct prompt run once: docs/models-and-engines.md#batches-and-logprob-definitions-modelbatchingpy."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rlkit.errors import UsageError
from rlkit.maze.core import GAMES, STOP, Action, Move
from rlkit.model.chat import Encoded
from rlkit.model.config import VISION_TOKENS
from rlkit.model.load import LoadedModel

_DIGESTS: dict[int, tuple[weakref.ref, bytes]] = {}
"""id(array) -> (a weak reference to it, its digest): each live array hashed once."""


def image_digest(patches: np.ndarray) -> bytes:
    """A digest of an image's patch values, shape and dtype (equal content, equal digest)."""
    key = id(patches)
    hit = _DIGESTS.get(key)
    if hit is not None and hit[0]() is patches:
        return hit[1]
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{patches.dtype}{patches.shape}".encode())
    h.update(np.ascontiguousarray(patches).tobytes())
    digest = h.digest()
    try:
        ref = weakref.ref(patches, lambda _, k=key: _DIGESTS.pop(k, None))
    except TypeError:  # an array view without weakref support: hashed every time
        return digest
    _DIGESTS[key] = (ref, digest)
    return digest


def prompt_key(prompt: Encoded) -> tuple:
    """A prompt's identity: its ids and its images' contents (`image_digest`)."""
    return tuple(prompt.prompt_ids), tuple(image_digest(p) for p, _ in prompt.images)


def distinct(keys: Sequence[Hashable]) -> tuple[list[int], torch.Tensor]:
    """The first row of each distinct key (in order) and, for every row, its key's index among
    those: rows == [rows[i] for i in index] up to equal keys."""
    firsts: dict[Hashable, int] = {}
    for row, key in enumerate(keys):
        firsts.setdefault(key, row)
    slot = {key: i for i, key in enumerate(firsts)}
    return list(firsts.values()), torch.tensor([slot[k] for k in keys], dtype=torch.long)


def banned_ids(loaded: LoadedModel) -> list[int]:
    """Ids outside the free distribution: `VISION_TOKENS` and `LoadedModel.tokenless_ids`."""
    tok = loaded.tokenizer
    ids = [tok.convert_tokens_to_ids(t) for t in VISION_TOKENS]
    vision = {i for i in ids if i is not None and i != tok.unk_token_id}
    return sorted(vision | set(loaded.tokenless_ids))


def mask_banned(logits: torch.Tensor, banned: list[int]) -> torch.Tensor:
    return logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))


@dataclass(frozen=True)
class AnswerSpec:
    """The constrained answer's tokens: forced prefix, one choice token, forced tail per word."""

    prefix: tuple[int, ...]
    choices: tuple[int, ...]
    """First token of each action word, in `moves` order (they must differ)."""
    tails: tuple[tuple[int, ...], ...]
    """The rest of each answer after its choice token, ending with the end-of-turn token."""
    moves: tuple[Move, ...] = tuple(Action)
    """The action each choice answers: `Action` order, then `stop` for the squares game."""

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, game: str = "cells") -> AnswerSpec:
        """The spec of `game` (`cells`: four moves; `squares`: four moves and `stop`)."""
        if game not in GAMES:
            raise UsageError(f"unknown game {game!r}: use one of {', '.join(GAMES)}")
        tok = loaded.tokenizer

        def ids(text: str) -> tuple[int, ...]:
            return tuple(tok(text, add_special_tokens=False)["input_ids"])

        moves = (*Action, STOP) if game == "squares" else tuple(Action)
        prefix, suffix = ids("<action>"), (*ids("</action>"), loaded.eos_id)
        words = [ids(a.word) for a in moves]
        choices = tuple(w[0] for w in words)
        if len(set(choices)) != len(choices):
            raise UsageError(
                "action words share a first token in this tokenizer: use constrained=False"
            )
        return cls(prefix, choices, tuple((*w[1:], *suffix) for w in words), moves)

    @property
    def choice_pos(self) -> int:
        """Index of the choice token within the response."""
        return len(self.prefix)

    def index(self, move: Move) -> int:
        """The choice index of `move` (`Action` value, 4 for `stop` in the squares game)."""
        try:
            return self.moves.index(move)
        except ValueError:
            raise UsageError(f"{move.word!r} is not an action of this answer spec") from None

    def response(self, action: int | Move) -> list[int]:
        k = action if isinstance(action, int) else self.index(action)
        return [*self.prefix, self.choices[k], *self.tails[k]]


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
    """For each image placeholder in batch order, its distinct image (each encoded once)."""
    image_grid_thw: torch.Tensor | None
    """(n_images, 3) patch grid per image, batch order (multimodal rope positions)."""
    position_ids: torch.Tensor
    """(3, B, L) multimodal rope positions (time, height, width), 0 on padding."""
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
    """(B, L, H) last hidden states as `Qwen3VLModel.forward`, each distinct image encoded once."""
    vlm = loaded.model.model
    embeds = vlm.get_input_embeddings()(batch.input_ids)
    image_pos = deepstack = None
    if batch.pixel_values is not None:
        feats = vlm.get_image_features(batch.pixel_values, batch.unique_grid_thw, return_dict=True)
        sizes = (batch.unique_grid_thw.prod(-1) // vlm.visual.spatial_merge_size**2).tolist()

        def in_row_order(x: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
            parts = x if isinstance(x, (list, tuple)) else torch.split(x, sizes)
            return torch.cat([parts[i] for i in batch.image_index])

        image_pos = batch.mm_token_type_ids.bool()
        image_embeds = in_row_order(feats.pooler_output).to(embeds.dtype)
        if int(image_pos.sum()) != image_embeds.shape[0]:
            raise UsageError(
                f"{int(image_pos.sum())} image pads but {image_embeds.shape[0]} image features: "
                "the prompt ids and images were not encoded together"
            )
        embeds = embeds.masked_scatter(image_pos.unsqueeze(-1).expand_as(embeds), image_embeds)
        deepstack = [in_row_order(f) for f in feats.deepstack_features]
    return vlm.language_model(
        inputs_embeds=embeds,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        visual_pos_masks=image_pos,
        deepstack_visual_embeds=deepstack,
    ).last_hidden_state


def prompt_positions(loaded: LoadedModel, prompt: Encoded) -> np.ndarray:
    """(3, P) rope positions of one prompt, by the model's own `get_rope_index` (cached)."""
    grid = prompt.image_grid_thw
    key = (tuple(prompt.prompt_ids), grid.tobytes())
    hit = loaded.positions.get(key)
    if hit is None:
        ids = torch.tensor([prompt.prompt_ids])
        pos, _ = loaded.model.model.get_rope_index(
            ids,
            (ids == loaded.model.config.image_token_id).int(),
            image_grid_thw=torch.from_numpy(grid) if len(grid) else None,
        )
        hit = loaded.positions.put(key, pos[:, 0].numpy())
    return hit


def padded_responses(responses: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, R) response tokens right-padded with 0, and (B, R) 1 on the real ones (R >= 1)."""
    r_len = max([len(r) for r in responses] + [1])
    resp = np.zeros((len(responses), r_len), np.int64)
    mask = np.zeros((len(responses), r_len), np.int64)
    for b, r in enumerate(responses):
        resp[b, : len(r)] = r
        mask[b, : len(r)] = 1
    return torch.from_numpy(resp), torch.from_numpy(mask)


def build_batch(
    loaded: LoadedModel,
    prompts: Sequence[Encoded],
    responses: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """Left-pad prompt + response ids into one batch on the model's device (response token j of
    row b at column L - R_b + j)."""
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
    resp, resp_mask = padded_responses(responses)
    dev = loaded.device
    image_id = loaded.model.config.image_token_id
    pv = unique_grid = grid = None
    images = [image for p in prompts for image in p.images]
    first, index = distinct([image_digest(patches) for patches, _ in images])
    if first:
        dtype = loaded.model.dtype
        pv = torch.from_numpy(np.concatenate([images[i][0] for i in first])).to(dev, dtype)
        unique_grid = torch.from_numpy(np.stack([images[i][1] for i in first])).to(dev)
        grid = unique_grid[index.to(dev)]
    ids_t = torch.from_numpy(ids).to(dev)
    return Batch(
        ids_t,
        torch.from_numpy(mask).to(dev),
        (ids_t == image_id).long(),
        pv,
        unique_grid,
        index.tolist(),
        grid,
        torch.from_numpy(pos).to(dev),
        resp.to(dev),
        resp_mask.to(dev),
    )


def logits_at(loaded: LoadedModel, batch: Batch, cols: torch.Tensor) -> torch.Tensor:
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
    mask_vision: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (logprobs, entropy), each (B, R), of `batch.response_ids` (0 where masked);
    `answer`: constrained; `mask_vision=False`: over the whole vocabulary (vLLM's raw_logprobs)."""
    b, r = batch.response_ids.shape
    length = batch.input_ids.shape[1]
    r_lens = batch.response_mask.sum(1, keepdim=True)
    j = torch.arange(r, device=batch.input_ids.device).unsqueeze(0)
    cols = (length - r_lens - 1 + j).clamp(0, length - 1)
    logits = logits_at(loaded, batch, cols) / temperature
    mask = batch.response_mask.bool()
    if answer is None:
        logp_all = torch.log_softmax(
            mask_banned(logits, banned_ids(loaded)) if mask_vision else logits, -1
        )
        logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all.nan_to_num(neginf=0.0)).sum(-1)
        return logp.masked_fill(~mask, 0.0), entropy.masked_fill(~mask, 0.0)
    choices = torch.tensor(answer.choices, device=logits.device)
    return _chosen_logprobs(logits[:, answer.choice_pos, choices], batch.response_ids, answer)


def _chosen_logprobs(
    choice_logits: torch.Tensor, response_ids: torch.Tensor, answer: AnswerSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """Constrained (logprobs, entropy), each (B, R), from (B, C) action-word logits at temperature."""
    pos = answer.choice_pos
    choices = torch.tensor(answer.choices, device=response_ids.device)
    hits = response_ids[:, pos].unsqueeze(-1) == choices
    if not bool(hits.any(-1).all()):
        raise UsageError("a response's choice token is not a move word: pass answer=None")
    logp_c = torch.log_softmax(choice_logits, -1)
    logp = torch.zeros(response_ids.shape, device=choice_logits.device, dtype=logp_c.dtype)
    entropy = torch.zeros_like(logp)
    logp[:, pos] = logp_c.gather(-1, hits.float().argmax(-1, keepdim=True)).squeeze(-1)
    entropy[:, pos] = -(logp_c.exp() * logp_c).sum(-1)
    return logp, entropy


def choice_logits(
    loaded: LoadedModel, prompts: Sequence[Encoded], answer: AnswerSpec
) -> torch.Tensor:
    """(B, C) logits of the C action words after each prompt and the answer prefix (one forward
    per distinct prompt)."""
    first, index = distinct([prompt_key(p) for p in prompts])
    batch = build_batch(loaded, [prompts[i] for i in first], [answer.prefix] * len(first))
    last = torch.full((len(first), 1), batch.input_ids.shape[1] - 1, device=loaded.device)
    return logits_at(loaded, batch, last)[:, 0, list(answer.choices)][index.to(loaded.device)]


def turn_logprobs(
    loaded: LoadedModel,
    prompts: Sequence[Encoded],
    responses: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    answer: AnswerSpec | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`response_logprobs` of `build_batch(prompts, responses)` and its (B, R) response mask,
    each distinct forward run once."""
    if len(responses) != len(prompts):
        raise UsageError(f"{len(prompts)} prompts but {len(responses)} responses")
    resp, mask = (t.to(loaded.device) for t in padded_responses(responses))
    if answer is not None:
        if any(tuple(r[: answer.choice_pos]) != answer.prefix for r in responses):
            raise UsageError("a response lacks the forced answer prefix: pass answer=None")
        logits = choice_logits(loaded, prompts, answer) / temperature
        return (*_chosen_logprobs(logits, resp, answer), mask)
    keys = [(prompt_key(p), tuple(r)) for p, r in zip(prompts, responses, strict=True)]
    first, index = distinct(keys)
    batch = build_batch(loaded, [prompts[i] for i in first], [responses[i] for i in first])
    logp, entropy = response_logprobs(loaded, batch, temperature=temperature)
    index = index.to(loaded.device)
    return logp[index], entropy[index], mask
