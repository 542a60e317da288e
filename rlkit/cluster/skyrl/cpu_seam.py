"""The device seam: stand-ins for the few CUDA-only calls in SkyRL 0.4.0, installed only when
`RLKIT_SKYRL_DEVICE=cpu` (`fixes.install_cpu_seam`), so SkyRL's own trainer runs on a CPU host.
The list and why: docs/skyrl-integration.md#the-cpu-device-seam-cpu_seampy."""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

_SKYRL = "skyrl.backends.skyrl_train"
TORCH_USERS = (
    f"{_SKYRL}.workers.worker",
    f"{_SKYRL}.workers.fsdp.fsdp_worker",
    f"{_SKYRL}.distributed.strategy",
    f"{_SKYRL}.distributed.fsdp_strategy",
    f"{_SKYRL}.distributed.fsdp_utils",
)
"""SkyRL modules whose module-level `torch` is replaced by `_torch_on_cpu()`."""


class _Front:
    """A real module with a few attributes in front of it; the rest is the module itself."""

    def __init__(self, real: Any, **overrides: Any) -> None:
        self._real = real
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return f"<{self._real.__name__} on CPU (rlkit.cluster.skyrl.cpu_seam)>"


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _cpu() -> torch.device:
    return torch.device("cpu")


def _mem_get_info(*_args: Any) -> tuple[int, int]:
    """(free, total) bytes of host memory."""
    import psutil

    vm = psutil.virtual_memory()
    return vm.available, vm.total


def init_gloo_process_group(*args: Any, backend: str | None = None, **kwargs: Any) -> None:
    """`init_process_group` with gloo: NCCL needs a GPU."""
    torch.distributed.init_process_group(*args, backend="gloo", **kwargs)


def init_cpu_device_mesh(device_type: str, *args: Any, **kwargs: Any):
    """`init_device_mesh` on the CPU, whatever device SkyRL names."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", *args, **kwargs)


def _torch_on_cpu() -> _Front:
    cuda = _Front(
        torch.cuda,
        current_device=_cpu,
        set_device=_noop,
        synchronize=_noop,
        empty_cache=_noop,
        device_count=lambda: 1,  # worker.py:427 takes `rank % device_count()`
        mem_get_info=_mem_get_info,
        memory_allocated=lambda *_: 0,
        memory_reserved=lambda *_: 0,
    )
    mesh = _Front(torch.distributed.device_mesh, init_device_mesh=init_cpu_device_mesh)
    dist = _Front(torch.distributed, init_process_group=init_gloo_process_group, device_mesh=mesh)
    return _Front(torch, cuda=cuda, distributed=dist)


def sync_non_persistent_buffers(model: torch.nn.Module, loaded_sd: dict) -> None:
    """SkyRL's `_sync_non_persistent_buffers` with CPU tensors: rank 0's buffers broadcast."""
    dist = torch.distributed
    for module in model.modules():
        for key in sorted(getattr(module, "_non_persistent_buffers_set", set())):
            buf = module._buffers.get(key)
            if buf is None:
                continue
            if dist.get_rank() == 0:
                src = buf.detach().to("cpu").clone()
            else:
                src = torch.empty(buf.shape, dtype=buf.dtype, device="cpu")
            dist.broadcast(src, src=0)
            module._buffers[key] = src


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask=None):
    """flash-attn 2.8's `bert_padding.unpad_input`: (packed (nnz, ...), indices (nnz,),
    cu_seqlens (batch + 1,), max_seqlen, seqlens (batch,)) of the tokens the mask keeps."""
    mask = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, int(seqlens.max().item()), used


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int):
    """flash-attn's `bert_padding.pad_input`: packed tokens back to (batch, seqlen, ...)."""
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


def flash_attn_padding() -> None:
    """Register the padding helpers as `flash_attn.bert_padding` unless flash-attn is installed."""
    with contextlib.suppress(ImportError):
        importlib.import_module("flash_attn.bert_padding")
        return
    # Specs, so importlib.util.find_spec answers; no __version__ or __file__, so transformers'
    # availability check still says flash-attn is not installed (and never picks its kernels).
    package = types.ModuleType("flash_attn")
    package.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None, is_package=True)
    package.__path__ = []
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.__spec__ = importlib.machinery.ModuleSpec("flash_attn.bert_padding", None)
    padding.pad_input, padding.unpad_input = pad_input, unpad_input
    package.bert_padding = padding
    sys.modules.setdefault("flash_attn", package)
    sys.modules.setdefault("flash_attn.bert_padding", padding)


def _one_process_engine(server_actor: types.ModuleType) -> None:
    build = server_actor._build_and_serve_vllm_server

    async def build_and_serve(cli_args: Any, *args: Any, **kwargs: Any) -> None:
        one_device = cli_args.tensor_parallel_size * cli_args.pipeline_parallel_size == 1
        if one_device and cli_args.distributed_executor_backend == "mp":
            cli_args.distributed_executor_backend = "uni"
        await build(cli_args, *args, **kwargs)

    server_actor._build_and_serve_vllm_server = build_and_serve


def _router_defaults(router_args: types.ModuleType) -> None:
    if not hasattr(router_args.RouterArgs, "pd_disaggregation"):
        router_args.RouterArgs.pd_disaggregation = False


def _torch_users(module: types.ModuleType) -> None:
    module.torch = _torch_on_cpu()


def _fsdp_utils(module: types.ModuleType) -> None:
    _torch_users(module)
    module.init_device_mesh = init_cpu_device_mesh
    module._sync_non_persistent_buffers = sync_non_persistent_buffers


PATCHES = {
    **dict.fromkeys(TORCH_USERS, _torch_users),
    f"{_SKYRL}.distributed.fsdp_utils": _fsdp_utils,
    f"{_SKYRL}.inference_servers.vllm_server_actor": _one_process_engine,
    "vllm_router.router_args": _router_defaults,
}
"""Module -> what changes in it, applied as it is imported (`fixes.on_import`)."""


def install_in_vllm_worker() -> None:
    """The part of the seam vLLM's own worker process needs (it is no Ray worker)."""
    engine = importlib.import_module(f"{_SKYRL}.weight_sync.delta.engine")
    engine.torch = _Front(torch, accelerator=_Front(torch.accelerator, synchronize=_noop))


def overrides(run_dir: str, attempt: str | None = None) -> list[str]:
    """SkyRL overrides a CPU run adds at each start: vLLM on CPU, delta sync in fresh dirs."""
    attempt = attempt or time.strftime("%Y%m%d-%H%M%S")
    delta = Path(run_dir) / "delta" / attempt
    engine = "generator.inference_engine"
    kwargs = f"{engine}.engine_init_kwargs"
    return [
        f"{engine}.weight_sync_backend=delta",
        f"{engine}.delta_weight_sync.sync_dir={delta / 'sync'}",
        f"{engine}.delta_weight_sync.local_checkpoint_dir={delta / 'receiver'}",
        f"{engine}.delta_weight_sync.publish_staging_dir={delta / 'staging'}",
        f"{kwargs}.worker_cls=vllm.v1.worker.cpu_worker.CPUWorker",
        f"{kwargs}.worker_extension_cls={__name__}.CpuWorkerExtension",
        f"{kwargs}.enable_sleep_mode=false",
        # vLLM refuses Ray executors on CPU; a one-device engine then runs "uni" (see above)
        f"{engine}.distributed_executor_backend=mp",
    ]


def __getattr__(name: str) -> Any:
    """`CpuWorkerExtension`, built on first use (SkyRL's extension needs vLLM)."""
    if name != "CpuWorkerExtension":
        raise AttributeError(name)
    from skyrl.backends.skyrl_train.inference_servers.new_inference_worker_wrap import (
        NewInferenceWorkerWrap,
    )

    install_in_vllm_worker()
    cls = type(
        "CpuWorkerExtension",
        (NewInferenceWorkerWrap,),
        {"__module__": __name__, "__doc__": "SkyRL's vLLM worker extension, on the CPU."},
    )
    globals()[name] = cls
    return cls
