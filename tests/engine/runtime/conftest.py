"""What the tests of the engine in its own process share: test_engine_process.py (the servers'
side) and test_engine_host.py (the engine process's) each run one engine process, `remote`."""

import asyncio
import time

import pytest

from tests.engine.streaming import speak
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineFull
from voicewire.engine.runtime.engine_process import EngineProcess

TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun."
GREEDY = StreamOptions(greedy=True, max_frames=30, suppress_eos=True)


@pytest.fixture(scope="module")
def config(tiny_checkpoints) -> EngineConfig:
    # One second of buffered audio: the 30-frame streams (2.4 s) go on only as they are acknowledged.
    return EngineConfig(
        model=str(tiny_checkpoints["custom_voice"]), max_streams=3, kv_length=256, max_buffered_seconds=1.0
    )


@pytest.fixture(scope="module")
def remote(config: EngineConfig):
    with EngineProcess.start(config) as engine:
        yield engine


def fill_every_slot(remote: EngineProcess) -> None:
    """Speak in all three slots at once, as soon as they are free (within 30 s)."""

    async def fill():
        streams = [remote.open_stream(await remote.voice(speaker="ryan"), GREEDY) for _ in range(3)]
        return await asyncio.gather(*(speak(s, ["Hi."]) for s in streams))

    deadline = time.monotonic() + 30
    while True:
        try:
            heard = asyncio.run(fill())
            break
        except EngineFull:
            assert time.monotonic() < deadline, "the disconnected server's streams kept their slots"
            time.sleep(0.2)
    assert [h.codes.shape for h in heard] == [(30, 16)] * 3


def until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
