"""An episode's prompt built turn by turn (`TurnRenderer`), each picture rendered by vLLM once; it
equals vLLM's render of the whole conversation: docs/skyrl-integration.md#the-generator-generatorpy-renderpy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlkit.episodes.rollout import history_window

IMAGE_PART = "image_url"
"""The content part an env observation carries its picture in (a PNG data URI)."""


def observation_start(
    ids: list[int], n_messages: int, eos_id: int, answer_ended: bool
) -> int | None:
    """Where the observation (the last `n_messages` and the generation prompt) starts in a render
    of the conversation: at the answer's end of turn, the (n_messages + 1)-th from the end, or
    after it if the sampled ids end with one (`answer_ended`; the render may show
    `<|im_end|><|im_end|>`). None if `ids` has too few end-of-turn tokens."""
    ends = [i for i, t in enumerate(ids) if t == eos_id]
    if len(ends) <= n_messages:
        return None
    end = ends[-(n_messages + 1)]
    return end + 1 if answer_ended and ids[end - 1] != eos_id else end


def image_urls(messages: list[dict]) -> list[str]:
    """The image URLs of `messages`' content parts, in order."""
    return [
        part[IMAGE_PART]["url"]
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == IMAGE_PART
    ]


@dataclass(frozen=True)
class RenderedImage:
    """One image as vLLM's render endpoint returns it, and decoded."""

    tokens: list[int]
    """Its placeholder tokens (Qwen-VL: a run of `<|image_pad|>`, one a merged patch)."""
    mm_hash: str | None
    kwargs: str | None
    """Its serialised processor outputs (base64 msgpack), sent with every generate request."""
    metadata: str | None
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor


def runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, end) of each run of `token` in `ids`."""
    out, start = [], None
    for i, t in enumerate([*ids, None]):
        if t == token and start is None:
            start = i
        elif t != token and start is not None:
            out.append((start, i))
            start = None
    return out


def splice(
    ids: list[int], image_id: int, images: list[RenderedImage]
) -> tuple[list[int], list[int]]:
    """`ids` with each `image_id` token (one an image) replaced by the next image's placeholder
    tokens; returns (ids, where each image's tokens start)."""
    if ids.count(image_id) != len(images):
        raise ValueError(
            f"the template wrote {ids.count(image_id)} image placeholders for {len(images)} "
            "images: a message's text holds the image token itself"
        )
    out: list[int] = []
    offsets: list[int] = []
    pending = iter(images)
    for t in ids:
        if t == image_id:
            offsets.append(len(out))
            out.extend(next(pending).tokens)
        else:
            out.append(t)
    return out, offsets


@dataclass
class EpisodePrompt:
    """The prompt an episode's next turn is generated from."""

    ids: list[int]
    images: list[RenderedImage] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    """Where each image's placeholder tokens start in `ids`."""
    by_url: dict[str, RenderedImage] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)
    """Hashes of the images the episode's engine has received with their tensors."""

    def features(self, skip_sent: bool = False) -> dict[str, Any] | None:
        """vLLM's multimodal features of `ids` (a new dict each call); `skip_sent`: images in
        `sent` go without tensors and metadata (by hash)."""
        if not self.images:
            return None
        keep = [not (skip_sent and im.mm_hash in self.sent) for im in self.images]
        metadata = [im.metadata if k else None for im, k in zip(self.images, keep, strict=True)]
        return {
            "mm_hashes": {"image": [im.mm_hash for im in self.images]},
            "mm_placeholders": {
                "image": [
                    {"offset": o, "length": len(im.tokens)}
                    for o, im in zip(self.offsets, self.images, strict=True)
                ]
            },
            "kwargs_data": {
                "image": [im.kwargs if k else None for im, k in zip(self.images, keep, strict=True)]
            },
            "mm_metadata": {"image": metadata} if any(m is not None for m in metadata) else None,
        }

    def mark_sent(self) -> None:
        self.sent.update(im.mm_hash for im in self.images if im.mm_hash is not None)

    def pixels(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(pixel_values, image_grid_thw) of all its images: patches concatenated, grids (N, 3)."""
        if not self.images:
            return None, None
        grids = [im.grid_thw.reshape(1, -1) for im in self.images]
        return torch.cat([im.pixel_values for im in self.images]), torch.cat(grids)


class TurnRenderer:
    """Builds episodes' prompts with the tokenizer and the client's render endpoint."""

    def __init__(
        self,
        client: Any,
        tokenizer: Any,
        image_id: int,
        decode: Callable[[Any], dict[str, torch.Tensor | None]],
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.image_id = image_id
        self.image_token = tokenizer.convert_ids_to_tokens(image_id)
        self.eos_id = tokenizer.eos_token_id
        self.decode = decode

    def template_ids(self, conversation: list[dict]) -> list[int]:
        """The chat template's ids of `conversation` and the generation prompt, one pad an image."""
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    async def _images(
        self, prompt: EpisodePrompt, urls: list[str], session_id: str
    ) -> list[RenderedImage]:
        """The images at `urls`, those `prompt` lacks rendered by the server in one request."""
        new = list(dict.fromkeys(u for u in urls if u not in prompt.by_url))
        if new:
            parts = [{"type": IMAGE_PART, IMAGE_PART: {"url": u}} for u in new]
            message = {"role": "user", "content": parts}
            body = {
                "model": self.client.model_name,
                "messages": [message],
                "session_id": session_id,
            }
            rendered = await self.client.render_chat_completion({"json": body})
            ids = rendered["token_ids"]
            found = runs(ids, self.image_id)
            if len(found) != len(new):
                raise RuntimeError(f"the render of {len(new)} images holds {len(found)}")
            # read as SkyRL reads a render's features (skyrl/backends/renderer.py)
            features = rendered.get("features") or {}
            hashes = features.get("mm_hashes", {}).get("image") or [None] * len(new)
            kwargs_data = features.get("kwargs_data")
            kwargs = (kwargs_data or {}).get("image") or [None] * len(new)
            metadata = (features.get("mm_metadata") or {}).get("image") or [None] * len(new)
            mm = self.decode(kwargs_data)
            grids = mm["image_grid_thw"].reshape(-1, 3)
            patches = torch.split(mm["pixel_values"], grids.prod(-1).tolist())
            for i, (url, (a, b)) in enumerate(zip(new, found, strict=True)):
                image = RenderedImage(
                    ids[a:b], hashes[i], kwargs[i], metadata[i], patches[i], grids[i]
                )
                prompt.by_url[url] = image
        return [prompt.by_url[u] for u in urls]

    async def start(self, conversation: list[dict], session_id: str) -> EpisodePrompt:
        prompt = EpisodePrompt(ids=[])
        images = await self._images(prompt, image_urls(conversation), session_id)
        prompt.ids, prompt.offsets = splice(self.template_ids(conversation), self.image_id, images)
        prompt.images = images
        return prompt

    async def window(
        self, cache: EpisodePrompt, conversation: list[dict], history: int, session_id: str
    ) -> EpisodePrompt:
        """The next turn's prompt under a history window, rendered whole, pictures from `cache`
        unless new; earlier answers re-tokenized without the image token."""
        shown = [
            {**m, "content": m["content"].replace(self.image_token, "")}
            if m["role"] == "assistant" and isinstance(m.get("content"), str)
            else m
            for m in history_window(conversation, history)
        ]
        images = await self._images(cache, image_urls(shown), session_id)
        ids, offsets = splice(self.template_ids(shown), self.image_id, images)
        return EpisodePrompt(ids, images, offsets, by_url=cache.by_url, sent=cache.sent)

    async def extend(
        self,
        prompt: EpisodePrompt,
        answer_ids: list[int],
        conversation: list[dict],
        n_messages: int,
        session_id: str,
    ) -> list[int]:
        """Append the sampled answer and the last `n_messages` (the observation) to `prompt`;
        returns the observation's ids."""
        ids = self.template_ids(conversation)
        answer_ended = bool(answer_ids) and answer_ids[-1] == self.eos_id
        start = observation_start(ids, n_messages, self.eos_id, answer_ended)
        if start is None:
            raise ValueError("the chat template closes no message with the end-of-turn token")
        new = conversation[len(conversation) - n_messages :]
        images = await self._images(prompt, image_urls(new), session_id)
        tail, offsets = splice(ids[start:], self.image_id, images)
        base = len(prompt.ids) + len(answer_ids)
        prompt.ids = [*prompt.ids, *answer_ids, *tail]
        prompt.images = [*prompt.images, *images]
        prompt.offsets = [*prompt.offsets, *(base + o for o in offsets)]
        return tail
