import pytest
import torch

from voicewire.engine.config import EngineConfig
from voicewire.engine.errors import InvalidOptions
from voicewire.engine.runtime.cpu_threads import use_cpu_threads


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_engine_on_cpu_sets_torchs_threads(threads) -> None:
    use_cpu_threads(torch.device("cpu"), 2)
    assert torch.get_num_threads() == 2
    use_cpu_threads(torch.device("cpu"), EngineConfig().cpu_threads)
    assert torch.get_num_threads() == 1


def test_a_cuda_engine_leaves_them_alone(threads) -> None:
    torch.set_num_threads(2)
    use_cpu_threads(torch.device("cuda"), 1)
    assert torch.get_num_threads() == 2


def test_cpu_threads_must_be_positive() -> None:
    assert EngineConfig.from_dict({"cpu_threads": 3}).cpu_threads == 3
    with pytest.raises(InvalidOptions, match="cpu_threads must be >= 1"):
        EngineConfig(cpu_threads=0)
