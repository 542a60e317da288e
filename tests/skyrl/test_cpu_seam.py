"""The device seam (rlkit.cluster.skyrl.cpu_seam): active only for a CPU preset, thin, and what
it stands in for behaves as the original does. The whole run it enables is
test_skyrl_cpu_run.py; these check its edges."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import torch
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg

from rlkit.cluster.skyrl import cpu_seam
from rlkit.cluster.skyrl.entry import parse_args
from rlkit.cluster.skyrl.fixes import DEVICE_ENV, THREAD_ENV, cpu_threads, runtime_env
from rlkit.cluster.skyrl.overrides import build_overrides, device_overrides, entrypoint_command
from rlkit.cluster.skyrl.presets import PRESETS, get_preset
from rlkit.settings import apply_settings

GPU_PRESETS = [name for name, p in PRESETS.items() if p.layout.device != "cpu"]
SKYRL_MODULES = "\n".join(f"import {m}" for m in cpu_seam.TORCH_USERS)


def python(code: str, **env: str) -> str:
    """Run `code` in a fresh interpreter (the way a Ray worker starts); its stdout."""
    clean = {k: v for k, v in os.environ.items() if k != DEVICE_ENV}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_a_gpu_preset_never_asks_for_the_seam(name):
    preset = get_preset(name)
    args, overrides = parse_args(shlex.split(entrypoint_command(preset, "r"))[3:])
    assert args.sky.layout.device == "cuda"
    keys = {o.split("=", 1)[0] for o in overrides}
    assert keys == {o.split("=", 1)[0] for o in build_overrides(preset, "r")}
    seam = {o.split("=", 1)[0] for o in cpu_seam.overrides("/fsx/r", "a")}
    on_cpu = set(device_overrides(apply_settings(preset, {"device": "cpu"}))) - set(
        device_overrides(preset)
    )
    assert on_cpu and not (seam | {o.split("=", 1)[0] for o in on_cpu}) & keys


def test_a_cpu_job_shares_the_hosts_cores_among_its_bundles(monkeypatch):
    """Each process of a CPU job gets its bundle's share of the cores (torch's default of one
    thread per core made every process's OpenMP threads wait on cores the others held);
    a thread count the job sets itself wins, and a GPU job is left as it was."""
    for k in THREAD_ENV:
        monkeypatch.delenv(k, raising=False)
    assert [cpu_threads(b, cores=2) for b in (1, 2, 4)] == [2, 1, 1]
    assert cpu_threads(2, cores=16) == 8
    env = runtime_env({"SKYRL_X": "1"}, "cpu", bundles=os.cpu_count() or 1)["env_vars"]
    assert env[DEVICE_ENV] == "cpu" and env["SKYRL_X"] == "1"
    assert all(env[k] == "1" for k in THREAD_ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert runtime_env({}, "cpu", bundles=2)["env_vars"]["OMP_NUM_THREADS"] == "3"
    assert runtime_env({"OMP_NUM_THREADS": "5"}, "cpu")["env_vars"]["OMP_NUM_THREADS"] == "5"
    gpu = runtime_env({"SKYRL_X": "1"}, "cuda", bundles=8)["env_vars"]
    assert gpu == {"SKYRL_X": "1"}


@pytest.mark.slow  # a Python subprocess importing SkyRL
def test_a_gpu_job_imports_none_of_the_seam():
    """What every process of a GPU job runs (the worker setup hook, the entry, SkyRL's worker
    modules) leaves SkyRL's modules as they are, and never imports the seam."""
    out = python(
        "import importlib.machinery as m, sys, types, torch\n"
        # flash-attn is in the cluster image; on this CPU host only its import is given
        "for name in ('flash_attn', 'flash_attn.bert_padding'):\n"
        "    sys.modules[name] = mod = types.ModuleType(name)\n"
        "    mod.__spec__ = m.ModuleSpec(name, None)\n"
        "    mod.pad_input = mod.unpad_input = None\n"
        "from rlkit.cluster.skyrl import fixes, entry\n"
        "fixes.setup()\n"
        f"{SKYRL_MODULES}\n"
        f"mods = [sys.modules[m] for m in {cpu_seam.TORCH_USERS!r}]\n"
        "assert all(m.torch is torch for m in mods)\n"
        "print('cpu_seam' in ' '.join(sys.modules))\n"
    )
    assert out.split()[-1] == "False"


@pytest.mark.slow  # a Python subprocess importing SkyRL
def test_a_cpu_job_gets_skyrl_modules_patched_as_they_are_imported():
    out = python(
        "import sys\n"
        "from rlkit.cluster.skyrl import fixes\n"
        "fixes.setup()\n"
        # installing imports none of SkyRL's worker modules (a Ray setup hook that did died)
        "assert not any(m in sys.modules for m in __import__('rlkit.cluster.skyrl.cpu_seam', "
        "fromlist=['x']).TORCH_USERS)\n"
        f"{SKYRL_MODULES}\n"
        "from skyrl.backends.skyrl_train.distributed import fsdp_utils\n"
        "from skyrl.backends.skyrl_train.workers import worker\n"
        "from transformers.utils import is_flash_attn_2_available\n"
        "import flash_attn.bert_padding\n"
        "print(worker.torch.cuda.current_device(), fsdp_utils.init_device_mesh.__name__,\n"
        "      is_flash_attn_2_available())\n",
        **{DEVICE_ENV: "cpu"},
    )
    assert out.split()[-3:] == ["cpu", "init_cpu_device_mesh", "False"]


def test_the_padding_helpers_pack_and_unpack_as_flash_attn_does():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    hidden = torch.arange(12.0).reshape(2, 3, 2)
    packed, indices, cu_seqlens, max_len, used = cpu_seam.unpad_input(hidden, mask)
    assert indices.tolist() == [0, 1, 3, 4, 5]  # flat positions the mask keeps
    assert cu_seqlens.tolist() == [0, 2, 5] and max_len == 3 and used.tolist() == [2, 3]
    assert packed.tolist() == [[0, 1], [2, 3], [6, 7], [8, 9], [10, 11]]
    back = cpu_seam.pad_input(packed, indices, batch=2, seqlen=3)
    assert torch.equal(back, hidden * mask.unsqueeze(-1))  # padding comes back as zeros


def test_each_attempt_gets_its_own_weight_sync_dirs_and_the_config_validates(tmp_path):
    preset = get_preset("skyrl-tiny-cpu", runs_root=str(tmp_path))
    run = f"{tmp_path}/r"
    first, again = cpu_seam.overrides(run, "a"), cpu_seam.overrides(run, "b")
    dirs = [o for o in first if "delta_weight_sync" in o]
    assert dirs and not set(dirs) & set(again)
    cfg = SkyRLTrainConfig.from_cli_overrides([*build_overrides(preset, "r"), *first])
    validate_cfg(cfg)
    ie = cfg.generator.inference_engine
    assert (ie.weight_sync_backend, ie.distributed_executor_backend) == ("delta", "mp")
    assert ie.engine_init_kwargs["enable_sleep_mode"] is False
    assert cfg.trainer.policy.fsdp_config.mixed_precision.param_dtype == "fp32"


def test_a_one_device_engine_runs_its_worker_in_the_engine_core():
    """SkyRL validates only "mp" or "ray"; the seam turns "mp" into vLLM's "uni" when an
    engine has one device (no worker process beside the core), and leaves bigger ones alone."""
    import asyncio
    import types
    from argparse import Namespace

    served: list[str] = []

    async def build(cli_args, **_kwargs):
        served.append(cli_args.distributed_executor_backend)

    module = types.SimpleNamespace(_build_and_serve_vllm_server=build)
    cpu_seam.PATCHES[f"{cpu_seam._SKYRL}.inference_servers.vllm_server_actor"](module)
    for tp in (1, 2):
        args = Namespace(
            tensor_parallel_size=tp, pipeline_parallel_size=1, distributed_executor_backend="mp"
        )
        asyncio.run(module._build_and_serve_vllm_server(args, enable_ray_prometheus_stats=False))
    assert served == ["uni", "mp"]
