"""engine/voice.py: a voice's arrays as the engine reads them, and the contract's names without PyTorch."""

import pickle

import numpy as np
import torch

from tests.fresh_interpreter import run_fresh
from voicewire.engine.voice import Voice


def test_a_voice_holds_float32_and_int64_arrays_whatever_it_was_given() -> None:
    voice = Voice(xvector=[0.5, -1.25, 2.0], ref_codes=[[i] * 16 for i in range(3)], ref_text="Hi.")
    assert voice.xvector is not None and voice.ref_codes is not None
    assert voice.xvector.dtype == np.float32 and voice.xvector.tolist() == [0.5, -1.25, 2.0]
    assert voice.ref_codes.dtype == np.int64 and voice.ref_codes.shape == (3, 16)
    assert voice.ref_codes[:, 0].tolist() == [0, 1, 2]
    # A caller's CPU tensors, as a program holding the engine in process may pass them.
    from_tensor = Voice(xvector=torch.arange(4, dtype=torch.float64))
    assert from_tensor.xvector is not None and from_tensor.xvector.dtype == np.float32
    assert from_tensor.xvector.tolist() == [0.0, 1.0, 2.0, 3.0]
    # A speaker encoder's output as it comes, still in autograd's graph (NumPy refuses it, as it
    # refuses a GPU tensor; both are copied to the host).
    encoded = torch.ones(3, requires_grad=True) * 0.5
    assert Voice(xvector=encoded).xvector.tolist() == [0.5, 0.5, 0.5]  # type: ignore[union-attr]
    codes = torch.full((2, 16), 7, dtype=torch.int32)
    assert Voice(ref_codes=codes).ref_codes.dtype == np.int64  # type: ignore[union-attr]
    assert Voice(speaker="ryan").xvector is None


def test_a_voice_crosses_processes_as_plain_values() -> None:
    voice = Voice(xvector=np.linspace(-1, 1, 64), ref_codes=np.ones((5, 16)), ref_text="Hello.")
    back = pickle.loads(pickle.dumps(voice))
    assert back.ref_text == "Hello." and back.language == "auto"
    assert back.xvector is not None and voice.xvector is not None
    np.testing.assert_array_equal(back.xvector, voice.xvector)
    assert back.ref_codes is not None and back.ref_codes.dtype == np.int64


def test_the_contract_and_a_workers_modules_load_without_pytorch() -> None:
    # What a server's worker process imports: the engine's contract and its client of the engine
    # process, the app, its metrics. `Engine` itself is the one name that loads PyTorch.
    code = (
        "import sys\n"
        "import voicewire.engine, voicewire.engine.api, voicewire.engine.runtime.engine_process\n"
        "import voicewire.server.serving, voicewire.server.app\n"
        "from voicewire.engine import Voice, StreamOptions, EngineConfig, SamplingParams\n"
        "pickled = __import__('pickle').dumps(Voice(xvector=[1.0, 2.0]))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from voicewire.engine import Engine\n"
        "assert 'torch' in sys.modules and Engine.__name__ == 'Engine'\n"
    )
    run_fresh(code)
