"""Session logic that a socket cannot time: a context the engine finished before its `done` is out."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from voicewire.engine import Engine, EngineConfig
from voicewire.server import protocol as p
from voicewire.server.config import ServerConfig
from voicewire.server.errors import ProtocolError
from voicewire.server.metrics import Metrics
from voicewire.server.session import Session
from voicewire.server.wire import MSGPACK, Codec


@pytest.mark.parametrize("verb", ["text", "flush", "end"])
def test_a_context_the_engine_finished_is_closed_before_its_done(tiny_models, verb: str) -> None:
    """The engine ends a context at max_frames while the session has not yet read its last chunk
    (its pump is not running here): text, flush and end then get `context_closed`, not a crash."""

    async def run() -> ProtocolError:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            session = Session(None, engine, Codec(MSGPACK), ServerConfig(), ThreadPoolExecutor(1), Metrics())  # type: ignore[arg-type]
            await session._handle(
                p.Start(type="start", voice={"speaker": "vivian"}, max_frames=2, suppress_eos=True)
            )
            await session._handle(p.Text(type="text", context_id="short", text="Hello there, "))
            context = session.contexts["short"]
            context.pump.cancel()  # nobody reads the stream: the session still sees it open
            result = await context.stream.wait()
            assert result.reason == "max_frames"
            message = (
                p.Text(type="text", context_id="short", text="more")
                if verb == "text"
                else p.Flush(type="flush", context_id="short")
                if verb == "flush"
                else p.End(type="end", context_id="short")
            )
            with pytest.raises(ProtocolError) as info:
                await session._handle(message)
            return info.value

    error = asyncio.run(run())
    assert error.code == "context_closed" and error.context_id == "short"
    assert "has finished" in error.message and "max_frames" in error.message
