"""SkyRL's own FSDP2 init (`FSDPStrategy.prepare`) on a tied tiny Qwen3-VL, in this process on a
one-rank gloo group: without rlkit's fix it unties lm_head from embed_tokens (the optimizer
gets one parameter more, and a step moves them apart); with `fixes.install()` they stay one
FSDP-sharded parameter through init, a step, an export and a dtype round trip.

CPU stand-ins, for these tests only (the CPU preset's own are in its device seam): a "cpu"
device mesh where `fsdp_utils.create_device_mesh` asks for "cuda", the non-persistent-buffer
broadcast on CPU tensors instead of `.cuda()` ones, `torch.cuda.current_device` answering "cpu"
for the grad-norm clip, and flash-attn's padding helpers for the import only
(`model_wrapper.py:13`; nothing here calls them).
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from rlkit.cluster.localhead import free_port
from rlkit.cluster.skyrl import fixes
from rlkit.model.build import build_tiny
from rlkit.model.config import TinyConfig

STRATEGY = fixes.FSDP_STRATEGY
TIED_PARAMS = 63
"""Distinct parameters of the tied tiny Qwen3-VL (the untied build has 64)."""


def _unavailable(*_args, **_kwargs):
    raise RuntimeError("flash-attn is not installed here: these tests never unpad")


def import_strategy():
    """SkyRL's fsdp_strategy module. Where flash-attn is missing, placeholder modules stand in
    while it imports (with a spec, which transformers' availability probe reads as absent)."""
    if STRATEGY in sys.modules:
        return sys.modules[STRATEGY]
    import transformers.modeling_utils  # noqa: F401 - its flash-attn probe runs before

    names = ("flash_attn", "flash_attn.bert_padding")
    placed = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            module.pad_input = module.unpad_input = _unavailable
            sys.modules[name] = module
            placed.append(name)
    try:
        return importlib.import_module(STRATEGY)
    finally:
        for name in placed:
            sys.modules.pop(name, None)


def _cpu_mesh(_device_type: str, *args, **kwargs):
    return init_device_mesh("cpu", *args, **kwargs)


def _sync_buffers_on_cpu(model: torch.nn.Module, _loaded_sd: dict) -> None:
    """`fsdp_utils._sync_non_persistent_buffers` with CPU tensors (one rank: rank 0's own)."""
    for module in model.modules():
        for key in sorted(getattr(module, "_non_persistent_buffers_set", set())):
            buf = module._buffers.get(key)
            if buf is not None:
                src = buf.detach().clone()
                dist.broadcast(src, src=0)
                module._buffers[key] = src


@pytest.fixture(scope="module")
def skyrl_fsdp():
    """SkyRL's fsdp_strategy and fsdp_utils on a one-rank gloo group with a CPU mesh."""
    strategy = import_strategy()
    from skyrl.backends.skyrl_train.distributed import fsdp_utils

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fsdp_utils, "init_device_mesh", _cpu_mesh)
        mp.setattr(fsdp_utils, "_sync_non_persistent_buffers", _sync_buffers_on_cpu)
        mp.setattr(torch.cuda, "current_device", lambda: torch.device("cpu"))
        mp.delenv("LOCAL_RANK", raising=False)  # else setup_distributed picks a CUDA device
        mp.setenv("MASTER_ADDR", "127.0.0.1")
        mp.setenv("MASTER_PORT", str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
        try:
            yield strategy, fsdp_utils
        finally:
            dist.destroy_process_group()


@pytest.fixture
def unfixed(skyrl_fsdp, monkeypatch):
    """The fsdp_strategy module as SkyRL ships it; whatever a test installs is undone after."""
    strategy, _ = skyrl_fsdp
    original = getattr(strategy.apply_fsdp2, "__wrapped__", strategy.apply_fsdp2)
    monkeypatch.setattr(strategy, "apply_fsdp2", original)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    return strategy


@pytest.fixture(scope="module")
def untied_dir(tmp_path_factory) -> Path:
    return build_tiny(
        tmp_path_factory.mktemp("untied") / "tiny",
        config=TinyConfig(tie_word_embeddings=False),
    )


def prepare(strategy, model_dir: Path):
    """What SkyRL's FSDP policy worker does (`fsdp_worker.py:44-97`), on rank 0 of one:
    the HF model in SkyRL's wrapper, then FSDPStrategy.prepare. Returns the wrapper, its
    optimizer and scheduler, the strategy, and the model's parameter count before FSDP."""
    from skyrl.backends.skyrl_train.workers.model_wrapper import HFModelWrapper
    from skyrl.train.config import FSDPConfig, OptimizerConfig

    # bf16=False as the policy worker passes it (`bf16=policy.inference_only_init`)
    wrapped = HFModelWrapper(str(model_dir), use_flash_attention_2=False, bf16=False)
    before = len(list(wrapped.model.parameters()))
    fsdp = strategy.FSDPStrategy(
        FSDPConfig(), OptimizerConfig(lr=1e-6), num_training_steps=2
    )  # SkyRL's default optimizer (AdamW, grad clip 1.0) at the 8B preset's lr
    with torch.random.fork_rng(devices=[]):  # set_seed seeds the global generator
        fsdp.setup_distributed()
    model, optimizer, scheduler = fsdp.prepare((wrapped, None, None))
    return model, optimizer, scheduler, fsdp, before


def step(fsdp, model, optimizer, scheduler) -> None:
    """One next-token loss step on the text stack, through SkyRL's optimizer_step."""
    ids = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    model.model(input_ids=ids, labels=ids).loss.backward()
    fsdp.optimizer_step(optimizer, model, scheduler)


def head_and_embedding(model) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    return model.get_output_embeddings().weight, model.get_input_embeddings().weight


def exported_gap(fsdp_utils, model) -> float:
    """max |lm_head - embed_tokens| in the full state dict SkyRL exports (`save_hf_model`)."""
    sd = fsdp_utils.fsdp2_get_full_state_dict(model.model, cpu_offload=True)
    return (
        (sd["lm_head.weight"] - sd["model.language_model.embed_tokens.weight"]).abs().max().item()
    )


def optimized(optimizer) -> int:
    return sum(len(g["params"]) for g in optimizer.param_groups)


def test_skyrl_fsdp2_init_unties_a_tied_model(skyrl_fsdp, unfixed, tiny_dir):
    _, fsdp_utils = skyrl_fsdp
    model, optimizer, scheduler, fsdp, before = prepare(unfixed, tiny_dir)
    assert before == TIED_PARAMS
    head, embedding = head_and_embedding(model.model)
    assert head is not embedding
    assert len(list(model.model.parameters())) == optimized(optimizer) == TIED_PARAMS + 1
    step(fsdp, model, optimizer, scheduler)
    assert exported_gap(fsdp_utils, model) > 0  # measured 2.0e-6: one AdamW step at lr 1e-6


def test_fix_keeps_one_shared_parameter(skyrl_fsdp, unfixed, tiny_dir):
    _, fsdp_utils = skyrl_fsdp
    fixes.install()
    fixes.install()
    assert unfixed.apply_fsdp2.__wrapped__ is fsdp_utils.apply_fsdp2  # wrapped, once
    model, optimizer, scheduler, fsdp, before = prepare(unfixed, tiny_dir)
    head, embedding = head_and_embedding(model.model)
    assert head is embedding
    assert len(list(model.model.parameters())) == optimized(optimizer) == before == TIED_PARAMS
    managed = model.model._get_fsdp_state()._fsdp_param_groups[0].fsdp_params
    shared = [p for p in managed if p._module_info.shared_modules]  # FSDP2's tied handling
    assert len(shared) == 1 and shared[0].sharded_param is embedding
    assert shared[0]._module_info.module is model.model.get_input_embeddings()
    assert shared[0]._module_info.shared_modules == [model.model.get_output_embeddings()]
    start = embedding.full_tensor().detach().clone()
    step(fsdp, model, optimizer, scheduler)
    assert not torch.equal(embedding.full_tensor(), start)  # the step trained it
    assert exported_gap(fsdp_utils, model) == 0.0
    model.model.to(torch.float64).to(torch.float32)  # an `_apply`, as SkyRL's offload/backload
    head, embedding = head_and_embedding(model.model)
    assert head is embedding and len(list(model.model.parameters())) == TIED_PARAMS
    step(fsdp, model, optimizer, scheduler)
    assert exported_gap(fsdp_utils, model) == 0.0


def test_fix_leaves_an_untied_model_alone(skyrl_fsdp, unfixed, untied_dir):
    fixes.install()
    model, optimizer, _, _, before = prepare(unfixed, untied_dir)
    assert before == TIED_PARAMS + 1
    head, embedding = head_and_embedding(model.model)
    assert head is not embedding
    assert len(list(model.model.parameters())) == optimized(optimizer) == before


WORKER = """
import sys
from rlkit.cluster.skyrl import fixes
fixes.install()
assert fixes.FSDP_STRATEGY not in sys.modules
sys.path.insert(0, {tests!r})
from test_tied_embeddings import import_strategy
strategy = import_strategy()
wrapped = strategy.apply_fsdp2
fixes.install()
from skyrl.backends.skyrl_train.distributed import fsdp_utils
assert strategy.apply_fsdp2 is wrapped and wrapped.__wrapped__ is fsdp_utils.apply_fsdp2
print("wrapped on import")
"""


@pytest.mark.slow  # a Python subprocess importing SkyRL
def test_install_before_the_import_wraps_it_when_imported():
    """As Ray's setup hook runs it: first, in a process that has not imported SkyRL's strategy."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    code = WORKER.format(tests=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "wrapped on import" in out.stdout
