"""The skyrl group: SkyRL's and vLLM's own code driving rlkit (marker `skyrl`, part of make test).

Only the inference engine is faked (`scripted_engine.py`), and only where a test says so; the
real-engine tests serve rlkit's tiny model with vLLM's CPU build.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from unittest.mock import patch

import pytest
import scripted_engine as se
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset import PromptDataset
from skyrl.train.evaluate import evaluate
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.utils.trainer_utils import build_dataloader
from transformers import AutoProcessor
from vllm_server import start_server

from rlkit.cluster.skyrl.entry import ensure_datasets
from rlkit.cluster.skyrl.overrides import RunPaths, build_overrides
from rlkit.cluster.skyrl.presets import get_preset
from rlkit.env.maze_env import register_env
from rlkit.model.build import build_tiny
from rlkit.model.chat import ChatEncoder

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.skyrl)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rlkit's tiny Qwen3-VL as an HF model directory (what a SkyRL export looks like)."""
    return build_tiny(tmp_path_factory.mktemp("skyrl") / "tiny")


@pytest.fixture(scope="session")
def tiny_server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One vLLM CPU server on `tiny_dir` for the files that talk to a real engine
    (test_vllm_engine.py, test_skyrl_render.py: one group, `SHARED_FIXTURES`): it starts once
    (~26 s)."""
    srv = start_server(tiny_dir, tmp_path_factory.mktemp("vllm") / "server.log", timeout_s=400)
    print(f"\nvLLM server ready in {srv.startup_s:.1f} s")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def processor(tiny_dir: Path):
    return AutoProcessor.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def tokenizer(processor):
    return processor.tokenizer


@pytest.fixture(scope="session")
def encoder(processor) -> ChatEncoder:
    return ChatEncoder(processor)


@pytest.fixture(scope="session")
def skyrl_cpu_run(ray_cluster, tmp_path_factory):
    """The session's one whole SkyRL run on CPU, killed once and resumed (cpu_run.py)."""
    from cpu_run import run_skyrl_on_cpu

    return run_skyrl_on_cpu(ray_cluster, tmp_path_factory.mktemp("skyrl-cpu"))


@pytest.fixture(scope="session")
def skyrl_qwen_step(ray_cluster, qwen_ckpt, tmp_path_factory) -> Path:
    """One SkyRL step on the real-text-side Qwen fixture (test_qwen_cpu_step.py): its run dir."""
    from cpu_run import run_cli

    root = tmp_path_factory.mktemp("skyrl-qwen")
    argv = ["submit", "--preset", "skyrl-tiny-cpu", "--address", ray_cluster.address]
    argv += ["--model", str(qwen_ckpt), "--runs-root", str(root), "--run-name", "qwen"]
    # 1 maze x 2 episodes of 3 turns: Qwen's 151,936-row logits are ~150x the tiny model's;
    # one logical GPU (one vLLM server, one FSDP rank): the suite's CPU run covers two ranks
    settings = {"steps": 1, "ckpt_interval": 1, "eval_mazes": 2, "eval_samples": 1}
    settings |= {"prompts_per_node": 1, "group_size": 2, "micro_batch_per_gpu": 1}
    settings |= {"gpus_per_node": 1}
    settings |= {"max_turns": 3, "capture_groups": 0}
    # no KL, so no reference model: its workers' start and forward on the 151,936-row vocab
    # (the suite's CPU run covers the reference model on two ranks)
    settings |= {"kl_loss_coef": 0.0}
    # what a researcher's first 8B run asks for, together: the seed's greedy eval and the
    # sampled one, two eval sets, a history window of 2 (one row a turn, SkyRL's step-wise
    # training)
    settings |= {"eval_protocol": "both", "eval_sets": "test,test-large", "history": 2}
    # and the two levers for long sparse episodes: GiGPO's step-level credit (rows a turn) and
    # the difficulty curriculum (rows written in step order, read in order)
    settings |= {"advantage_estimator": "gigpo", "curriculum_steps": 1}
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    assert run_cli(*argv) == 0
    job = ray_cluster.reattach("qwen")
    status = job.wait(600)
    assert status.value == "SUCCEEDED", job.logs()[-3000:]
    return root / "qwen"


@pytest.fixture
def skyrl_run_dir(skyrl_cpu_run, tmp_path: Path) -> Path:
    """A copy of the session's SkyRL CPU run dir, for tests that read it like a user would."""
    return Path(shutil.copytree(skyrl_cpu_run.run_dir, tmp_path / skyrl_cpu_run.run_dir.name))


@pytest.fixture(autouse=True, scope="session")
def _registered() -> None:
    register_env()  # what rlkit.cluster.skyrl.entry does inside the Ray task


EVAL_MAZES = 16
"""The skyrl_eval fixture's mazes: the test set's first 16 (its preset's eval_mazes). With no
dataloader workers they take ~2 s; 64 mazes with SkyRL's 8 spawned workers took 76 s."""


@pytest.fixture(scope="session")
def skyrl_eval(tmp_path_factory, encoder):
    """SkyRL's eval at global step 10 of a preset run whose runs_root is a temp dir."""
    preset = get_preset(
        "qwen3vl-8b-6gpu",
        runs_root=str(tmp_path_factory.mktemp("runs")),
        eval_set="test",
        eval_samples=2,
        eval_protocol="sampled",  # a part of the set, sampled
        eval_mazes=EVAL_MAZES,
        dataloader_workers=0,  # SkyRL's 8 spawned workers would each import torch here
    )
    paths = RunPaths.for_run(preset, "contract")
    # what the job's entrypoint does first
    ensure_datasets(paths.data_dir, 4, preset.task.eval_set, preset.eval.eval_mazes)
    cfg = SkyRLTrainConfig.from_cli_overrides(build_overrides(preset, "contract"))
    tok = encoder.tokenizer
    ds = PromptDataset(cfg.data.val_data, tok, cfg.trainer.max_prompt_length, num_workers=1)
    engine = se.ScriptedEngine(encoder, [ds.dataframe[i] for i in range(len(ds))], se.mixed)
    generator = SkyRLVLMGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tok)
    with patch("skyrl.train.generators.skyrl_vlm_generator.decode_mm_kwargs", se.decode_features):
        metrics = asyncio.run(
            evaluate(build_dataloader(cfg, ds, is_train=False), generator, cfg, 10, tok)
        )
    return cfg, metrics
