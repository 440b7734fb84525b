import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.oracle_env import run_oracle

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def oracle() -> Callable[..., str]:
    """Runs a script from tests/oracle/ under the official qwen-tts venv (built once, cached)."""
    return run_oracle


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny random checkpoint per variant, in the published layout."""
    from voicewire.engine.tiny import VARIANTS, make_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    return {v: make_checkpoint(root / v, v, "tiny", seed=1234) for v in VARIANTS}


@pytest.fixture(autouse=True, scope="session")
def _offline_hub() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
