"""LoRA adapters and a frozen vision side on a loaded Qwen3-VL (`Tuning`), with peft, as SkyRL's
FSDP workers apply them: docs/local-trainer.md#lora-and-a-frozen-vision-side-modellorapy."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlkit.errors import UsageError
from rlkit.model.config import Tuning
from rlkit.model.load import no_progress_bars

if TYPE_CHECKING:
    from peft import PeftModel

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def tune(model: torch.nn.Module, t: Tuning, *, seed: int = 0) -> PeftModel | None:
    """Apply `t` to `model` in place: with `lora_rank` > 0 attach adapters (every base weight
    frozen, none on the frozen vision modules) and return peft's wrapper (for saving); else
    freeze the vision modules `freeze_vision` names and return None. Adapters are initialised
    from `seed`, the caller's torch RNG untouched."""
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
    """The model with its adapters merged in, as a plain HF checkpoint at `out`: a copy is
    merged, so the training model's base weights keep every bit."""
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
