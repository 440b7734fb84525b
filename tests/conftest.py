import os
import shutil
from collections.abc import Callable
from pathlib import Path

# Without a GPU, Triton kernels (engine/kernels/fused_layer.py) run in Triton's interpreter, on CPU
# tensors. Triton reads this when it is imported, and importing torch imports it.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from tests.oracle_env import run_oracle

# One thread per op, as the engine runs on CPU (engine/runtime/cpu_threads.py): two OpenMP threads on this
# 2-core machine stall at every op's barrier whenever a server or browser subprocess is busy.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def oracle() -> Callable[..., str]:
    """Runs a script from tests/oracle/ under the official qwen-tts venv (built once, cached)."""
    return run_oracle


class TinyCheckpoints:
    """Tiny random checkpoints in the published layout, one per variant, made on first use."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._made: dict[str, Path] = {}

    def __getitem__(self, variant: str) -> Path:
        from voicewire.engine.model.random_checkpoint import make_checkpoint

        if variant not in self._made:
            self._made[variant] = make_checkpoint(self._root / variant, variant, "tiny", seed=1234)
        return self._made[variant]


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> TinyCheckpoints:
    return TinyCheckpoints(tmp_path_factory.mktemp("checkpoints"))


class TinyModels(dict):
    """Each variant's tiny checkpoint loaded as a Qwen3TTS, on first use."""

    def __init__(self, checkpoints: TinyCheckpoints) -> None:
        super().__init__()
        self._checkpoints = checkpoints

    def __missing__(self, variant: str):
        from voicewire.engine.model.qwen3_tts import Qwen3TTS

        self[variant] = Qwen3TTS.load(self._checkpoints[variant])
        return self[variant]


@pytest.fixture(scope="session")
def tiny_models(tiny_checkpoints: TinyCheckpoints) -> TinyModels:
    return TinyModels(tiny_checkpoints)


@pytest.fixture(autouse=True, scope="session")
def _offline_hub() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
