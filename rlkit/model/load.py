"""Load any Qwen3-VL checkpoint dir (tiny or real) through one code path, its vision tower on
faster equal computations, and tune it (LoRA adapters, a frozen vision side):
docs/models-and-engines.md#the-vision-tower-on-cpu-modelloadpy."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from transformers import (
    AttentionInterface,
    AutoProcessor,
    PreTrainedTokenizerBase,
    ProcessorMixin,
    Qwen3VLForConditionalGeneration,
)
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionPatchEmbed
from transformers.utils import logging as hf_logging

from rlkit.errors import UsageError
from rlkit.model import checkpoint_files
from rlkit.model.chat import ChatEncoder, LruCache, chat_template
from rlkit.model.config import MODEL_TYPE, Tuning

if TYPE_CHECKING:
    from peft import PeftModel


@dataclass
class LoadedModel:
    """Everything needed to run a Qwen3-VL checkpoint on env messages."""

    model: Qwen3VLForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    processor: ProcessorMixin
    """The checkpoint's own `AutoProcessor` (tokenizer, image processor, chat template)."""
    path: Path
    encoder: ChatEncoder = field(init=False)
    positions: LruCache = field(init=False)
    """Multimodal rope positions per distinct (prompt ids, image grids)."""

    def __post_init__(self) -> None:
        self.encoder = ChatEncoder(self.processor)
        self.positions = LruCache(4096)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    @cached_property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end an answer, end of turn first (`checkpoint_files.stop_ids`)."""
        return checkpoint_files.stop_ids(self.path, self.eos_id)

    @cached_property
    def tokenless_ids(self) -> range:
        """Output rows no token maps to (Qwen pads 151,669 tokens to 151,936 rows)."""
        return range(len(self.tokenizer), self.model.get_output_embeddings().out_features)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(
            pad if pad is not None else self.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        )


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """No transformers progress bar inside (one per save/load is noise in CLI output)."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def check_checkpoint(path: str | Path) -> Path:
    """`path` as a Path if it holds a Qwen3-VL checkpoint, else a one-line UsageError."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UsageError(
            f"{p} is not a model directory (no config.json): build one with `rlkit model tiny --out DIR`"
        )
    model_type = json.loads(cfg_file.read_text()).get("model_type")
    if model_type is None:
        raise UsageError(f"{p}/config.json names no model_type: not a transformers checkpoint")
    if model_type != MODEL_TYPE:
        raise UsageError(f"{p} holds a {model_type!r} model; rlkit runs Qwen3-VL ({MODEL_TYPE!r})")
    # transformers 5 writes processor_config.json; older dirs and Qwen's preprocessor_config.json
    if not any((p / n).is_file() for n in ("preprocessor_config.json", "processor_config.json")):
        raise UsageError(
            f"{p} has no preprocessor_config.json or processor_config.json: copy the "
            "checkpoint's processor files beside its weights"
        )
    return p


ATTENTION = "rlkit_flash_uniform_sdpa"
"""The batched vision attention's name ("flash" in it makes the vision tower pass `cu_seqlens`)."""


def uniform_varlen_attention(
    module,
    query,
    key,
    value,
    attention_mask=None,
    *,
    scaling=None,
    dropout=0.0,
    cu_seq_lens_q=None,
    **kwargs,
):
    """(1, heads, total, d) packed q/k/v -> ((1, total, heads, d), None), block-diagonal: one
    batched call when every image has the same length."""
    _, heads, total, dim = query.shape
    cu = cu_seq_lens_q if cu_seq_lens_q is not None else torch.tensor([0, total])
    lengths = (cu[1:] - cu[:-1]).tolist()
    if len(set(lengths)) == 1:
        n, length = len(lengths), lengths[0]
        q, k, v = (t[0].view(heads, n, length, dim).transpose(0, 1) for t in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)
        return out.permute(0, 2, 1, 3).reshape(1, total, heads, dim), None
    outs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)
        for q, k, v in zip(
            *(torch.split(t, lengths, dim=2) for t in (query, key, value)), strict=True
        )
    ]
    return torch.cat(outs, dim=2).transpose(1, 2), None


AttentionInterface.register(ATTENTION, uniform_varlen_attention)


class LinearPatchEmbed(Qwen3VLVisionPatchEmbed):
    """`Qwen3VLVisionPatchEmbed` computed as `F.linear` on the conv's flattened weight."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight  # (embed, channels, t, p, p): one output per whole patch
        flat = hidden_states.to(dtype=w.dtype).reshape(-1, w[0].numel())
        return F.linear(flat, w.reshape(w.shape[0], -1), self.proj.bias)


def use_linear_patch_embed(model) -> None:
    """Compute a loaded Qwen3-VL's patch embedding as a matrix product (idempotent; only the
    class is swapped: state dicts see no difference)."""
    embed = model.model.visual.patch_embed
    if not isinstance(embed, Qwen3VLVisionPatchEmbed):
        return
    conv = embed.proj
    if (
        tuple(conv.kernel_size) == tuple(conv.stride)  # one window per output, no padding
        and all(p == 0 for p in conv.padding)
        and all(d == 1 for d in conv.dilation)
        and conv.groups == 1
    ):
        embed.__class__ = LinearPatchEmbed


def fast_vision(model: Qwen3VLForConditionalGeneration) -> Qwen3VLForConditionalGeneration:
    """`model` with its vision tower on batched attention and the patch conv as a matrix product."""
    vision_cfg = model.config.vision_config
    if "flash" not in (vision_cfg._attn_implementation or ""):
        vision_cfg._attn_implementation = ATTENTION
    use_linear_patch_embed(model)
    return model


def load(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> LoadedModel:
    """Load a Qwen3-VL checkpoint dir (tiny or real) in eval mode on `device`; `dtype` defaults
    to float32 on CPU (exact logprob checks) and bfloat16 elsewhere."""
    p = check_checkpoint(path)
    if dtype is None:
        dtype = torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    with no_progress_bars():
        model = _weights(p, dtype)
    model = fast_vision(model.to(device).eval())
    processor = AutoProcessor.from_pretrained(p)
    tok = processor.tokenizer
    tok.padding_side = "left"  # batched generation appends to the right end of every row
    return LoadedModel(model, tok, processor, p)


ADAPTER_CONFIG = "adapter_config.json"
"""peft's adapter config: without weights beside it, a LoRA adapter dir (SkyRL's LoRA export)."""


def is_adapter_dir(path: Path) -> bool:
    """Whether `path` holds a LoRA adapter and no full weights."""
    weights = [*path.glob("model*.safetensors"), *path.glob("pytorch_model*.bin")]
    return (path / ADAPTER_CONFIG).is_file() and not weights


def _weights(p: Path, dtype: torch.dtype) -> Qwen3VLForConditionalGeneration:
    """The checkpoint's model; for an adapter dir, its `base_model_name_or_path` (relative to
    the dir) with the adapter merged."""
    if not is_adapter_dir(p):
        return Qwen3VLForConditionalGeneration.from_pretrained(p, dtype=dtype)
    from peft import PeftModel  # ~3 s of imports: only for adapter dirs

    base = json.loads((p / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise UsageError(f"{p}/{ADAPTER_CONFIG} names no base_model_name_or_path")
    local = p / base
    base = str(local.resolve()) if local.exists() else base
    model = Qwen3VLForConditionalGeneration.from_pretrained(base, dtype=dtype)
    return PeftModel.from_pretrained(model, p).merge_and_unload()


def processor_template(model_path: str | Path) -> str:
    """The chat template vLLM renders `model_path`'s prompts with (a local dir or a hub id)."""
    return chat_template(AutoProcessor.from_pretrained(model_path))


def template_text(path: str | Path, messages: list[dict]) -> tuple[str, int]:
    """`messages` as the checkpoint's processor renders them for generation (one image pad per
    image: `rlkit eval --show-prompt`) and how many images they hold."""
    processor = AutoProcessor.from_pretrained(check_checkpoint(path))
    text, images = ChatEncoder(processor).chat_text(messages)
    return text, len(images)


ADAPTER_WEIGHTS = "adapter_model.safetensors"


def tune(model: torch.nn.Module, t: Tuning, *, seed: int = 0) -> PeftModel | None:
    """Apply `t` to `model` in place: with `lora_rank` > 0 attach adapters seeded by `seed` (not
    on frozen vision modules) and return peft's wrapper; else freeze vision and return None."""
    pattern = t.frozen_pattern
    model.zero_grad(set_to_none=True)  # a frozen weight's last gradient would count in clipping
    if t.lora_rank == 0:
        if pattern is not None:
            for name, p in model.named_parameters():
                if re.fullmatch(pattern, name):
                    p.requires_grad_(False)
        return None
    from peft import LoraConfig, get_peft_model  # ~3 s of imports: only where LoRA is on

    config = LoraConfig(
        r=t.lora_rank,
        lora_alpha=t.lora_alpha,
        target_modules=t.target_modules,
        exclude_modules=pattern,
        lora_dropout=0.0,
        bias="none",
        init_lora_weights=True,  # SkyRL's `init_method=kaiming`
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters an optimizer should get: those that still require a gradient."""
    return [p for p in model.parameters() if p.requires_grad]


def save_merged(adapter: PeftModel, out: Path) -> None:
    """A merged copy of the model as a plain HF checkpoint at `out` (the training model intact)."""
    merged = copy.deepcopy(adapter).merge_and_unload()
    with no_progress_bars():
        merged.save_pretrained(out)


def save_adapter(adapter: PeftModel, out: Path) -> None:
    """The adapter alone (peft's layout, as SkyRL exports it) at `out`."""
    adapter.save_pretrained(out)


def load_adapter_weights(adapter: PeftModel, path: Path) -> None:
    """Set `adapter`'s weights to those saved at `path` (`save_adapter`'s dir)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(adapter, load_file(path / ADAPTER_WEIGHTS))
    if getattr(result, "unexpected_keys", None):
        raise UsageError(f"{path} holds adapter weights this model has no place for")
