"""rlkit's fixes to SkyRL 0.4.0, installed in every process of a SkyRL job by `install()`.

One fix: FSDP2's init unties tied word embeddings (`FSDPStrategy._fsdp_init_model`), so the
trainer trained one model while vLLM sampled another; `apply_fsdp2` is wrapped to tie them
again before sharding and after every load. Untied and PEFT models are left alone.
Measured and explained: docs/skyrl-integration.md#fixes-to-skyrl-fixespy-worker_setuppy.
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
