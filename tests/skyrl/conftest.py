"""The skyrl group: SkyRL's and vLLM's own code driving rlkit (marker `skyrl`, part of make test).

Only the inference engine is faked (`scripted_engine.py`), and only where a test says so; the
real-engine tests serve rlkit's tiny model with vLLM's CPU build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoProcessor

from rlkit.chat import ChatEncoder
from rlkit.env import register_env
from rlkit.models import build_tiny

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
def processor(tiny_dir: Path):
    return AutoProcessor.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def tokenizer(processor):
    return processor.tokenizer


@pytest.fixture(scope="session")
def encoder(processor) -> ChatEncoder:
    return ChatEncoder(processor)


@pytest.fixture(autouse=True, scope="session")
def _registered() -> None:
    register_env()  # what rlkit.skyrl_entry does inside the Ray task
