"""Qwen3-VL models: build the tiny offline one, load any checkpoint dir, encode env messages.

`build_tiny(dir)` makes a ~1 M-parameter `Qwen3VLForConditionalGeneration` from a config (no
download) with its own byte-level BPE tokenizer (`rlkit.tokenizer`) and a PIL image processor,
saved as a normal HF model directory. `load(dir)` reads that directory or a real Qwen3-VL
checkpoint (e.g. Qwen3-VL-8B-Instruct on a GPU machine) through the same code path.

Without torchvision (never installed on CPU: the PyPI wheel is a CUDA build that breaks
transformers' image path) `Qwen3VLProcessor` cannot build its video processor, so the workaround
lives here only: `ImageTextProcessor` is the Qwen3-VL processor without video, and the tokenizer
and the PIL image processor are saved and loaded separately.

`ChatEncoder` is the one formatting path: env messages (OpenAI-style, images as PNG data URIs)
-> chat template -> input ids + pixel_values + image_grid_thw, with the output of the HF
processor. It caches template text per message skeleton, ids per distinct prompt text, and
patches per distinct image, and cuts patches with numpy when no resize is needed (a test checks
it equals the HF processor exactly).
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import (
    AutoTokenizer,
    PreTrainedTokenizerBase,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
    smart_resize,
)

from rlkit.errors import UsageError
from rlkit.render import image_from_data_uri

MODEL_TYPE = "qwen3_vl"


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny local Qwen3-VL (defaults: the recipe in findings that reached 90%)."""

    hidden: int = 128
    """Text width: big enough to learn 3x3 mazes, small enough for ~450 turns/s on 2 cores."""
    layers: int = 2
    """Text decoder layers; the policy is mostly a readout of the image tokens."""
    heads: int = 4
    """Query heads (head_dim 32)."""
    kv_heads: int = 2
    """Key/value heads: grouped-query attention as in the real Qwen3-VL."""
    head_dim: int = 32
    intermediate: int = 256
    """MLP width (2x hidden)."""
    mrope_section: tuple[int, int, int] = (8, 4, 4)
    """Rotary dims per (time, height, width); sums to head_dim / 2."""
    vision_depth: int = 2
    vision_hidden: int = 64
    vision_heads: int = 4
    patch_size: int = 8
    """8 px = one maze cell per patch with the default render style (the main learning lever)."""
    merge: int = 2
    """2x2 patches merge into one image token: a 6x6-cell view becomes 9 tokens."""
    deepstack: tuple[int, ...] = (1,)
    """Vision layers whose features are also injected into the text stack (Qwen3-VL deepstack)."""
    vocab_size: int = 512
    """BPE vocabulary before special and answer tokens; the env's texts need few merges."""
    max_image_px: int = 1024 * 1024
    """Largest image area before the processor downsizes (full-maze renders stay unscaled)."""

    def __post_init__(self) -> None:
        if sum(self.mrope_section) * 2 != self.head_dim:
            raise UsageError(
                f"mrope_section {self.mrope_section} must sum to head_dim/2 ({self.head_dim // 2})"
            )
        if self.heads % self.kv_heads:
            raise UsageError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )


class ImageTextProcessor(Qwen3VLProcessor):
    """`Qwen3VLProcessor` without a video processor (which needs torchvision).

    Images and text behave exactly as in the real processor; videos are not supported.
    """

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


@dataclass
class LoadedModel:
    """Everything needed to run a Qwen3-VL checkpoint on env messages."""

    model: Qwen3VLForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    image_processor: Qwen2VLImageProcessorPil
    processor: ImageTextProcessor
    path: Path
    encoder: ChatEncoder = field(init=False)
    positions: _Lru = field(init=False)
    """Multimodal rope positions per distinct (prompt ids, image grids): a handful of distinct
    prompts per run, while the model's own computation is a Python loop per row."""

    def __post_init__(self) -> None:
        self.encoder = ChatEncoder(self.tokenizer, self.image_processor)
        self.positions = _Lru(4096)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(
            pad if pad is not None else self.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        )


def _hf_config(cfg: TinyConfig, vocab: int, tok: PreTrainedTokenizerBase) -> Qwen3VLConfig:
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    return Qwen3VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": cfg.hidden,
            "intermediate_size": cfg.intermediate,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": list(cfg.mrope_section),
                "mrope_interleaved": True,
            },
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": cfg.vision_depth,
            "hidden_size": cfg.vision_hidden,
            "intermediate_size": cfg.vision_hidden * 2,
            "num_heads": cfg.vision_heads,
            "patch_size": cfg.patch_size,
            "spatial_merge_size": cfg.merge,
            "temporal_patch_size": 2,
            "out_hidden_size": cfg.hidden,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": list(cfg.deepstack),
        },
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )


def build_tiny(out_dir: str | Path, *, seed: int = 0, config: TinyConfig | None = None) -> Path:
    """Build, randomly initialise (seeded) and save the tiny Qwen3-VL with its tokenizer."""
    from rlkit.tokenizer import build_tokenizer  # training the BPE imports the env's texts

    cfg = config or TinyConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(cfg.vocab_size)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(_hf_config(cfg, len(tok), tok))
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=cfg.patch_size,
        merge_size=cfg.merge,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": (cfg.patch_size * cfg.merge) ** 2, "longest_edge": cfg.max_image_px},
    )
    image_processor.save_pretrained(out)
    (out / "rlkit_tiny.json").write_text(json.dumps({"seed": seed, **asdict(cfg)}, indent=1))
    return out


def check_checkpoint(path: str | Path) -> Path:
    """`path` as a Path if it holds a Qwen3-VL checkpoint, else a one-line UsageError."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UsageError(
            f"{p} is not a model directory (no config.json): build one with `rlkit model tiny --out DIR`"
        )
    model_type = json.loads(cfg_file.read_text()).get("model_type")
    if model_type != MODEL_TYPE:
        raise UsageError(f"{p} holds a {model_type!r} model; rlkit runs Qwen3-VL ({MODEL_TYPE!r})")
    if not (p / "preprocessor_config.json").is_file():
        raise UsageError(f"{p} has no preprocessor_config.json: copy the checkpoint's image config")
    return p


def load(path: str | Path, *, device: str = "cpu", dtype: torch.dtype | None = None) -> LoadedModel:
    """Load a Qwen3-VL checkpoint dir (tiny or real) in eval mode on `device`.

    `dtype` defaults to float32 on CPU (exact logprob checks) and bfloat16 elsewhere.
    """
    p = check_checkpoint(path)
    if dtype is None:
        dtype = torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    model = Qwen3VLForConditionalGeneration.from_pretrained(p, dtype=dtype).to(device).eval()
    tok = AutoTokenizer.from_pretrained(p, padding_side="left")
    # The PIL class whatever the checkpoint names: the fast one needs torchvision.
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(p)
    processor = ImageTextProcessor(image_processor, tok, chat_template=tok.chat_template)
    return LoadedModel(model, tok, image_processor, processor, p)


@dataclass
class Encoded:
    """One prompt as the model takes it."""

    prompt_ids: list[int]
    images: list[tuple[np.ndarray, np.ndarray]]
    """Per image: (patches (n, 3 * temporal_patch * patch**2) float32, grid_thw (3,) int64).
    Cached images come back as the same array objects, so a batch can encode each once."""
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


class _Lru(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


class ChatEncoder:
    """Env messages -> `Encoded`, identical to the HF processor's output, with caches.

    Image parts may be OpenAI `image_url` parts with a PNG data URI (what the env sends) or HF
    `image` parts holding a PIL image or an (H, W, 3) uint8 array (a trainer's re-render).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        image_processor: Qwen2VLImageProcessorPil,
        *,
        fast: bool = True,
        cache_size: int = 4096,
    ) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.fast = fast
        ip = image_processor
        self.patch, self.merge, self.tp = ip.patch_size, ip.merge_size, ip.temporal_patch_size
        self.image_pad = "<|image_pad|>"
        self._mean = np.asarray(ip.image_mean, np.float32).reshape(3, 1, 1)
        self._std = np.asarray(ip.image_std, np.float32).reshape(3, 1, 1)
        self._texts, self._ids, self._images = _Lru(256), _Lru(cache_size), _Lru(cache_size)

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
                        parts.append({"type": "image"})
                    elif kind == "image":
                        images.append(part.get("image"))
                        parts.append({"type": "image"})
                    else:
                        parts.append(part)
                content = parts
            skeleton.append({"role": m["role"], "content": content})
        key = json.dumps(skeleton, sort_keys=True)
        text = self._texts.get(key)
        if text is None:
            text = self._texts.put(
                key,
                self.tokenizer.apply_chat_template(
                    copy.deepcopy(skeleton), tokenize=False, add_generation_prompt=True
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
        proc = ImageTextProcessor(self.image_processor, self.tokenizer)
        pil = [_to_pil(im) for im in images] or None
        out = proc(text=[text], images=pil, return_tensors="np")
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
        x = (arr.transpose(2, 0, 1) * np.float64(self.image_processor.rescale_factor)).astype(
            np.float32
        )
        x = (x - self._mean) / self._std
        p, m, gh, gw = self.patch, self.merge, h // self.patch, w // self.patch
        x = x.reshape(3, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
        x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], self.tp, p, p))
        return np.ascontiguousarray(x.reshape(gh * gw, 3 * self.tp * p * p)), np.array(
            [1, gh, gw], np.int64
        )


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
