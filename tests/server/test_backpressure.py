"""A client that stops reading is cut off, and told so; a normal session beside it is not slowed or
hurt."""

import asyncio
import socket
import time
from urllib.parse import urlparse

import httpx
import msgpack
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.server.conftest import running_server
from tests.server.wsclient import WireClient
from voicewire.server.config import ServerConfig
from voicewire.server.wire import MSGPACK

LONG = "A reader that never reads fills every buffer between us. " * 20


def test_a_slow_reader_is_cut_off_and_a_normal_session_goes_on(tiny_models) -> None:
    config = ServerConfig(send_buffer_s=3.0)

    async def run(url: str):
        host = urlparse(url)
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel buffers little for it
        raw.connect((host.hostname, host.port))
        slow = await connect(f"{url}/v1/stream", sock=raw, subprotocols=[MSGPACK], max_queue=1)
        await slow.send(
            msgpack.packb(
                {
                    "type": "start",
                    "voice": {"speaker": "ryan"},
                    "format": {"encoding": "pcm_f32le", "sample_rate": 48000},
                }
            )
        )
        await slow.send(msgpack.packb({"type": "text", "context_id": "s", "text": LONG}))
        await slow.send(msgpack.packb({"type": "end", "context_id": "s"}))
        # ... and it never reads again. Meanwhile a normal session runs to its end.
        normal = await WireClient.open(url)
        await normal.start(voice={"speaker": "vivian"}, max_frames=40)
        await normal.send(
            {"type": "text", "context_id": "n", "text": "A normal listener hears every packet."}
        )
        await normal.send({"type": "end", "context_id": "n"})
        done, before = await normal.until(lambda m: m["type"] == "done", timeout=120)
        await normal.close()
        # The slow one is cut off: its engine stream is released, and the error is counted.
        deadline = time.monotonic() + 60
        while live_streams() or "slow_consumer" not in metrics():
            assert time.monotonic() < deadline, "the slow reader was never cut off"
            await asyncio.sleep(0.1)
        # When it reads again, it gets what was already on its way, then why it was cut off, then
        # the close frame.
        after = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                after.append(msgpack.unpackb(await asyncio.wait_for(slow.recv(), 30)))
        raw.close()
        return done, before, after, closed.value

    with running_server(tiny_models["custom_voice"], config) as server:
        live_streams = lambda: server.engine.live_streams  # noqa: E731
        metrics = lambda: httpx.get(f"{server.http}/metrics").text  # noqa: E731
        done, before, after, closed = asyncio.run(run(server.url))
        assert done["samples"] == sum(m["samples"] for m in before if m["type"] == "audio") == 40 * 1920 * 2
        assert 'voicewire_errors_total{code="slow_consumer"} 1.0' in metrics()
        error = after[-1]
        assert (error["type"], error["code"], error["fatal"]) == ("error", "slow_consumer", True)
        assert {m["type"] for m in after[:-1]} <= {"ready", "audio", "progress"}
        assert closed.rcvd is not None and closed.rcvd.code == 1008
