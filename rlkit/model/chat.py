"""Env messages -> Qwen3-VL inputs: the one formatting path (`ChatEncoder`), with caches:
docs/models-and-engines.md#env-messages-to-model-inputs-modelchatpy."""

from __future__ import annotations

import copy
import json
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image
from transformers import ProcessorMixin
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from rlkit.errors import UsageError
from rlkit.maze.render import image_from_data_uri


@dataclass
class Encoded:
    """One prompt as the model takes it."""

    prompt_ids: list[int]
    images: list[tuple[np.ndarray, np.ndarray]]
    """Per image: (patches (n, 3 * temporal_patch * patch**2) float32, grid_thw (3,) int64)."""
    patch_dim: int

    @property
    def pixel_values(self) -> np.ndarray:
        """(n_patches, patch_dim) all images' patches: the processor's `pixel_values`."""
        if not self.images:
            return np.zeros((0, self.patch_dim), np.float32)
        return np.concatenate([p for p, _ in self.images])

    @property
    def image_grid_thw(self) -> np.ndarray:
        """(n_images, 3) patch grid (t, h, w) per image."""
        if not self.images:
            return np.zeros((0, 3), np.int64)
        return np.stack([g for _, g in self.images])


ImageLike = str | Image.Image | np.ndarray


class TemplateWarning(UserWarning):
    """A checkpoint carries two different chat templates (processor's and tokenizer's)."""


def chat_template(processor: ProcessorMixin) -> str:
    """The template both engines render with: the processor's, else the tokenizer's."""
    own, tok = (getattr(x, "chat_template", None) for x in (processor, processor.tokenizer))
    own, tok = (t.get("default") if isinstance(t, dict) else t for t in (own, tok))
    if own and tok and own != tok:
        warnings.warn(
            "this checkpoint's processor and tokenizer carry different chat templates: rlkit and "
            "vLLM render with the processor's (chat_template.json / .jinja)",
            TemplateWarning,
            stacklevel=3,
        )
    template = own or tok
    if not template:
        raise UsageError(
            "this checkpoint has no chat template (no chat_template.json, chat_template.jinja "
            "or tokenizer_config.json chat_template): copy the checkpoint's template files"
        )
    return template


class LruCache(OrderedDict):
    """A dict that forgets its least recently used entry past `size` (values: pure functions of
    their keys, so it changes speed only)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


class ChatEncoder:
    """Env messages -> `Encoded`, identical to the HF processor's output, with caches; image
    parts are `image_url` PNG data URIs (the env's) or `image` parts (PIL or (H, W, 3) uint8)."""

    def __init__(
        self, processor: ProcessorMixin, *, fast: bool = True, cache_size: int = 4096
    ) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_processor = ip = processor.image_processor
        self.fast = fast
        self.patch, self.merge, self.tp = ip.patch_size, ip.merge_size, ip.temporal_patch_size
        self.image_pad = "<|image_pad|>"
        self.template = chat_template(processor)
        self._mean = np.asarray(ip.image_mean, np.float32).reshape(3, 1, 1)
        self._std = np.asarray(ip.image_std, np.float32).reshape(3, 1, 1)
        self._texts = LruCache(256)
        self._ids = LruCache(cache_size)
        self._images = LruCache(cache_size)

    def chat_text(self, messages: list[dict]) -> tuple[str, list[ImageLike]]:
        """The chat-template text (one image pad per image) and the images, in order."""
        skeleton, images = [], []
        for m in messages:
            content = m["content"]
            if not isinstance(content, str):
                parts = []
                for part in content:
                    kind = part.get("type")
                    if kind == "image_url":
                        images.append(part["image_url"]["url"])
                    elif kind == "image":
                        images.append(part.get("image"))
                    parts.append({"type": "image"} if kind in ("image", "image_url") else part)
                content = parts
            skeleton.append({"role": m["role"], "content": content})
        key = json.dumps(skeleton, sort_keys=True)
        text = self._texts.get(key)
        if text is None:
            text = self._texts.put(
                key,
                self.tokenizer.apply_chat_template(
                    copy.deepcopy(skeleton),
                    chat_template=self.template,
                    tokenize=False,
                    add_generation_prompt=True,
                ),
            )
        return text, images

    def encode(self, messages: list[dict]) -> Encoded:
        text, images = self.chat_text(messages)
        if not self.fast:
            return self._encode_hf(text, images)
        pixels = [self.image_patches(im) for im in images]
        n_tokens = tuple(int(g.prod()) // self.merge**2 for _, g in pixels)
        ids = self._ids.get((text, n_tokens))
        if ids is None:
            pieces = text.split(self.image_pad)
            if len(pieces) != len(n_tokens) + 1:
                raise UsageError("message text contains a literal <|image_pad|>: remove it")
            full = pieces[0] + "".join(
                self.image_pad * n + rest for n, rest in zip(n_tokens, pieces[1:], strict=True)
            )
            ids = self._ids.put((text, n_tokens), self.tokenizer(full)["input_ids"])
        return Encoded(list(ids), pixels, 3 * self.tp * self.patch**2)

    def _encode_hf(self, text: str, images: list[ImageLike]) -> Encoded:
        pil = [_to_pil(im) for im in images] or None
        out = self.processor(text=[text], images=pil, return_tensors="np")
        ids = [int(i) for i in out["input_ids"][0]]
        if not images:
            return Encoded(ids, [], 3 * self.tp * self.patch**2)
        grids = out["image_grid_thw"]
        chunks = np.split(out["pixel_values"], np.cumsum(grids.prod(1))[:-1])
        return Encoded(ids, list(zip(chunks, grids, strict=True)), out["pixel_values"].shape[1])

    def image_patches(self, image: ImageLike) -> tuple[np.ndarray, np.ndarray]:
        """(patches, grid_thw) of one image; cached by data URI."""
        if isinstance(image, str):
            hit = self._images.get(image)
            if hit is None:
                hit = self._images.put(image, self._patches(np.asarray(_to_pil(image))))
            return hit
        return self._patches(np.asarray(_to_pil(image)))

    def _patches(self, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = arr.shape[:2]
        size = self.image_processor.size
        target = smart_resize(
            h,
            w,
            factor=self.patch * self.merge,
            min_pixels=size["shortest_edge"],
            max_pixels=size["longest_edge"],
        )
        if target != (h, w):  # resampling is the processor's job: no second implementation
            out = self.image_processor(images=[Image.fromarray(arr)], return_tensors="np")
            return out["pixel_values"], out["image_grid_thw"][0]
        # float64 rescale then float32, as transformers does: bit-equal patches
        scale = np.float64(self.image_processor.rescale_factor)
        x = (arr.transpose(2, 0, 1) * scale).astype(np.float32)
        x = (x - self._mean) / self._std
        p, m, gh, gw = self.patch, self.merge, h // self.patch, w // self.patch
        x = x.reshape(3, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
        x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], self.tp, p, p))
        patches = np.ascontiguousarray(x.reshape(gh * gw, 3 * self.tp * p * p))
        return patches, np.array([1, gh, gw], np.int64)


def _to_pil(image: ImageLike) -> Image.Image:
    if isinstance(image, str):
        return image_from_data_uri(image)
    if isinstance(image, np.ndarray):
        return Image.fromarray(image.astype(np.uint8), mode="RGB")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    raise UsageError(
        f"unsupported image {type(image).__name__}: pass a PNG data URI, PIL image or array"
    )
