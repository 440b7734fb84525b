"""The WebSocket layer under the sessions (server.wire.WireProtocol): every oversized frame gets
`message_too_large`, fatal only past the size a socket reads; a text frame that is not UTF-8 gets a
fatal `bad_message` and a 1007 close; a client's fault is one log line, never a traceback; a send
of many frames (FRAMES) writes them all, in order."""

import asyncio
import json
import logging
import threading
from collections.abc import Iterator

import msgpack
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.server.conftest import RunningServer, running_server
from tests.server.wsclient import JSON, MSGPACK, WireClient
from voicewire.server.app import BackgroundServer
from voicewire.server.config import ServerConfig, ws_max_size
from voicewire.server.wire import FRAMES

CONFIG = ServerConfig(max_message_bytes=4096)
CAP = ws_max_size(CONFIG)  # 16 MiB: the most a socket reads of one frame


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    with running_server(tiny_models["custom_voice"], CONFIG) as running:
        yield running


def _ping(subprotocol: str, size: int) -> str | bytes:
    """A ping frame of exactly `size` bytes on the wire."""
    if subprotocol == JSON:
        frame = json.dumps({"type": "ping", "id": ""})
        return frame[:-2] + "x" * (size - len(frame)) + '"}'
    pad = size
    while len(frame := msgpack.packb({"type": "ping", "id": "x" * pad})) != size:
        pad -= len(frame) - size  # the string's header grows with its length
    return frame


@pytest.mark.parametrize("subprotocol", [JSON, MSGPACK])
def test_every_oversized_frame_gets_message_too_large(server, subprotocol: str) -> None:
    """Just over the limit, 1 MiB, and the largest frame a socket reads: a non-fatal error, and the
    session goes on. One byte more, or 64 MiB: a fatal error, then the close frame (1009)."""
    assert CAP == 16 * 2**20

    async def run():
        client = await WireClient.open(server.url, subprotocol)
        answers = []
        for size in (4097, 2**20, CAP):
            frame = _ping(subprotocol, size)
            assert len(frame if isinstance(frame, bytes) else frame.encode()) == size
            await client.ws.send(frame)
            error = await client.recv()
            await client.send({"type": "ping", "id": str(size)})
            answers.append((size, error, await client.recv()))
        await client.close()
        refusals = []
        for size in (CAP + 1, 4 * CAP):
            client = await WireClient.open(server.url, subprotocol)
            # The answer comes while the client is still writing its frame.
            sending = asyncio.create_task(client.ws.send(_ping(subprotocol, size)))
            fatal = await client.recv()
            with pytest.raises(ConnectionClosed) as closed:
                await client.recv()
            await sending
            refusals.append((size, fatal, closed.value))
        # The server goes on serving.
        other = await WireClient.open(server.url, subprotocol)
        await other.send({"type": "ping", "id": "other"})
        pong = await other.recv()
        await other.close()
        return answers, refusals, pong

    answers, refusals, pong = asyncio.run(run())
    for size, error, after in answers:
        assert error == {
            "type": "error",
            "code": "message_too_large",
            "message": f"a frame holds at most 4096 bytes, got {size}",
            "context_id": None,
            "fatal": False,
        }
        assert after == {"type": "pong", "id": str(size)}
    for size, fatal, closed in refusals:
        assert fatal == {
            "type": "error",
            "code": "message_too_large",
            "message": f"a frame over {CAP} bytes is not read, got {size}; the socket closes (1009)",
            "context_id": None,
            "fatal": True,
        }
        assert closed.rcvd is not None and closed.rcvd.code == 1009
    assert pong == {"type": "pong", "id": "other"}


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of the server, uvicorn's too (its loggers do not propagate to the root)."""
    caplog.set_level(logging.INFO)
    uvicorn = logging.getLogger("uvicorn")
    uvicorn.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        uvicorn.removeHandler(caplog.handler)


@pytest.mark.parametrize("subprotocol", [JSON, MSGPACK])
def test_a_text_frame_that_is_not_utf8_is_one_log_line(server, server_log, subprotocol: str) -> None:
    """RFC 6455 fails the connection (1007); the client hears why first, in its own codec, and a
    session beside it goes on."""

    async def run():
        beside = await WireClient.open(server.url, MSGPACK)
        await beside.start(voice={"speaker": "vivian"}, max_frames=8)
        client = await WireClient.open(server.url, subprotocol)
        await client.ws.send(b'{"type": "ping", "id": "\xff\xfe"}', text=True)
        error = await client.recv()
        with pytest.raises(ConnectionClosed) as closed:
            await client.recv()
        await beside.send({"type": "text", "context_id": "c", "text": "Still here."})
        await beside.send({"type": "end", "context_id": "c"})
        done, before = await beside.until(lambda m: m["type"] == "done")
        await beside.close()
        return error, closed.value, done, before

    error, closed, done, before = asyncio.run(run())
    assert error == {
        "type": "error",
        "code": "bad_message",
        "message": "a text frame must be UTF-8: invalid start byte at byte 24; the socket closes (1007)",
        "context_id": None,
        "fatal": True,
    }
    assert closed.rcvd is not None and closed.rcvd.code == 1007
    assert done["samples"] == sum(m["samples"] for m in before if m["type"] == "audio") > 0
    records = server_log.records
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    faults = [r for r in records if "not UTF-8" in r.getMessage()]
    assert [(r.name, r.levelno) for r in faults] == [("voicewire.server.wire", logging.INFO)]


def test_a_send_of_frames_writes_them_all_in_order() -> None:
    """FRAMES (server.wire): the layer names it in the scope; one send writes binary and text frames
    in order, a large one too (the socket's buffer takes it in parts); once the client is gone, a
    send of FRAMES fails as a send of one frame does."""
    frames: list[bytes | str] = [b"\x01", "two", b"\x03" * 300_000, "four"]
    seen: dict[str, object] = {}
    finished = threading.Event()

    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        seen["extensions"] = dict(websocket.scope.get("extensions") or {})
        await websocket.send({"type": "websocket.send", FRAMES: frames})
        seen["client"] = await websocket.receive()  # the client's close
        try:
            await websocket.send({"type": "websocket.send", FRAMES: [b"late"]})
        except WebSocketDisconnect as exc:
            seen["late"] = exc.code
        finished.set()

    app = Starlette(routes=[WebSocketRoute("/", endpoint)])
    app.state.config = ServerConfig()
    runner = BackgroundServer(app)
    port = runner.start()
    try:
        with connect(f"ws://127.0.0.1:{port}/", max_size=None) as client:
            got = [client.recv(timeout=10) for _ in frames]
        assert finished.wait(10)
    finally:
        runner.stop()
    assert got == frames
    assert FRAMES in seen["extensions"]  # type: ignore[operator]
    assert seen["client"] == {"type": "websocket.disconnect", "code": 1000, "reason": ""}
    assert seen["late"] == 1006
