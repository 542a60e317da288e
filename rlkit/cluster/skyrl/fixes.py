"""rlkit's fixes to SkyRL 0.4.0, installed in every process of a SkyRL job (GPU and CPU alike)
by `install()`, which Ray's worker_process_setup_hook calls. Each wraps one SkyRL function and
says which and why; none touches the algorithm.

FSDP2 init unties tied word embeddings. `FSDPStrategy._fsdp_init_model`
(`distributed/fsdp_strategy.py:224-253`) snapshots `module.state_dict()`, moves the module to
the meta device (`:245`: `nn.Module.to` gives `lm_head.weight` and `embed_tokens.weight` a new
Parameter each, so the tie is gone), then calls `apply_fsdp2` (`fsdp_utils.py:209`, whose wrap
policy already expects a tied model to reach it tied: it shards `nn.Embedding` separately only
`if not model.config.tie_word_embeddings`) and `fsdp2_load_full_state_dict` (`:253`, which loads
with `assign=True` on meta parameters and so unties the pair a second time). Measured on CPU
with the tiny Qwen3-VL (tests/skyrl/test_tied_embeddings.py): the optimizer got 64 parameters
instead of 63, and one AdamW step at lr 1e-6 left lm_head 2e-6 off embed_tokens; vLLM ties
lm_head to embed_tokens itself for a tied config, so the trainer trained one model while the
sampler sampled another. Qwen3-VL-2B (rlkit's smoke preset) and, we believe, 4B are tied;
8B and larger are not.

`apply_fsdp2` as `fsdp_strategy` looks it up is wrapped: before sharding, the model's tied
parameters are tied again, exactly as transformers tied them at load (the model's
`all_tied_weights_keys`, which from_pretrained prunes when a checkpoint's head disagrees with
its embedding), so FSDP2 shards the shared parameter once; after sharding, a load_state_dict
post-hook ties them again after every load, so SkyRL's `assign=True` load leaves one parameter
too. A model transformers did not tie is left alone, whatever its text_config says: transformers
5.16 ties Qwen3-VL by the top-level flag, and vLLM 0.32 copies that flag onto the text config
(`vllm/config/vllm.py` 955-983), so both sides build it untied. PEFT models are left alone: LoRA
freezes both matrices, so they cannot drift apart.

`fsdp_strategy` imports flash-attn at module level (through `model_wrapper.py:13`), and most of
a job's processes (vLLM servers, data tasks) never import it, so `install()` wraps it when it is
first imported, or at once if it already is.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

FSDP_STRATEGY = "skyrl.backends.skyrl_train.distributed.fsdp_strategy"
"""The SkyRL module whose `apply_fsdp2` name is wrapped."""
_MARK = "__rlkit_fix__"


def retie(model: Any) -> bool:
    """Tie `model`'s parameters as transformers tied them at load; False if it tied none."""
    tied = getattr(model, "all_tied_weights_keys", None)
    # the class, not the instance: PeftModel forwards attribute reads to the model it wraps
    if not tied or not callable(getattr(type(model), "tie_weights", None)):
        return False
    model.tie_weights(recompute_mapping=False)
    return True


def _retie_after_load(module: Any, _incompatible_keys: Any) -> None:
    retie(module)


def tying_apply_fsdp2(apply_fsdp2: Any) -> Any:
    """SkyRL's `apply_fsdp2(model, fsdp_kwargs, config)` with tied embeddings tied again before
    sharding and after every load_state_dict of the sharded model."""
    if getattr(apply_fsdp2, _MARK, False):
        return apply_fsdp2

    @functools.wraps(apply_fsdp2)
    def apply_fsdp2_tied(model: Any, fsdp_kwargs: Any, config: Any) -> Any:
        if not retie(model):
            return apply_fsdp2(model, fsdp_kwargs, config)
        out = apply_fsdp2(model, fsdp_kwargs, config)
        model.register_load_state_dict_post_hook(_retie_after_load)
        return out

    setattr(apply_fsdp2_tied, _MARK, True)
    return apply_fsdp2_tied


def _fix(module: ModuleType) -> None:
    module.apply_fsdp2 = tying_apply_fsdp2(module.apply_fsdp2)


class _Loader(importlib.abc.Loader):
    """The module's own loader, with the fix applied right after the module runs."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _fix(module)

    def __getattr__(self, name: str) -> Any:  # get_source and friends, for tracebacks
        return getattr(self._inner, name)


class _FixOnImport(importlib.abc.MetaPathFinder):
    """Finds only `fsdp_strategy`, through the ordinary path finder, with `_Loader` on it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != FSDP_STRATEGY:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Apply rlkit's fixes to SkyRL in this process (idempotent)."""
    if not any(isinstance(f, _FixOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FixOnImport())
    loaded = sys.modules.get(FSDP_STRATEGY)
    if loaded is not None and hasattr(loaded, "apply_fsdp2"):
        _fix(loaded)
