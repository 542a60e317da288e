"""What every process of a SkyRL job runs first (`setup`): rlkit's fixes to SkyRL 0.4.0, and on a
CPU preset the device seam, each patch applied as SkyRL imports its module (`on_import`); why:
docs/skyrl-integration.md#fixes-to-skyrl-fixespy."""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

FSDP_STRATEGY = "skyrl.backends.skyrl_train.distributed.fsdp_strategy"
_MARK = "__rlkit_fix__"
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Read by torch (and MKL) when a process starts: its intra-op thread count."""
DEVICE_ENV = "RLKIT_SKYRL_DEVICE"
""""cpu" in a CPU preset's job; unset on GPUs."""
HOOK = f"{__name__}.setup"
_PATCHES: dict[str, list[Callable[[ModuleType], None]]] = {}
"""Module -> what `on_import` applies to it, in order."""


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds the modules of `_PATCHES` with the other finders and patches each once executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _PatchOnImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                real_exec = spec.loader.exec_module

                def exec_module(module, real_exec=real_exec):
                    real_exec(module)
                    for patch in _PATCHES[name]:
                        patch(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def on_import(patches: dict[str, Callable[[ModuleType], None]]) -> None:
    """Apply each patch to its module now if it is loaded, else right after it is imported."""
    for name, patch in patches.items():
        if patch not in _PATCHES.setdefault(name, []):
            _PATCHES[name].append(patch)
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


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
    """SkyRL's `apply_fsdp2` with tied embeddings tied again before sharding and after loads."""
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
    if hasattr(module, "apply_fsdp2"):
        module.apply_fsdp2 = tying_apply_fsdp2(module.apply_fsdp2)


def install() -> None:
    """Apply rlkit's fixes to SkyRL in this process (idempotent)."""
    on_import({FSDP_STRATEGY: _fix})


@functools.cache
def install_cpu_seam() -> None:
    """Install the device seam in this process (once)."""
    from rlkit.cluster.skyrl import cpu_seam

    cpu_seam.flash_attn_padding()
    on_import(cpu_seam.PATCHES)


def cpu_threads(bundles: int, cores: int | None = None) -> int:
    """Threads per process on a CPU host: the cores shared by the colocated bundles (a bundle's
    rank and engine take turns, so each gets the bundle's share)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, bundles))


def runtime_env(env_vars: dict[str, str], device: str, bundles: int = 1) -> dict:
    """`ray.init`'s runtime_env: the setup hook, and on a CPU host the device and thread budget."""
    extra = {}
    if device == "cpu":
        threads = str(cpu_threads(bundles))
        extra = {DEVICE_ENV: device} | {k: os.environ.get(k, threads) for k in THREAD_ENV}
    return {"env_vars": {**extra, **env_vars}, "worker_process_setup_hook": HOOK}


def setup() -> None:
    """Ray's worker_process_setup_hook for SkyRL jobs (imports nothing heavy)."""
    install()
    if os.environ.get(DEVICE_ENV) == "cpu":
        install_cpu_seam()
