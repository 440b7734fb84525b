"""Session logic that a socket cannot time: a context the engine finished before its `done` is out,
the listener's clock at the socket, and what a client that stopped reading gets."""

import asyncio
import threading
from collections.abc import Iterator

import msgpack
import numpy as np
import pytest

from voicewire.engine import Engine, EngineConfig
from voicewire.engine.runtime.stream import AudioChunk
from voicewire.server import protocol as p
from voicewire.server.codec_pool import CodecPool
from voicewire.server.config import ServerConfig
from voicewire.server.encoder import AudioEncoder, OutputFormat
from voicewire.server.errors import ProtocolError
from voicewire.server.metrics import Metrics
from voicewire.server.session import Context, Session, _SlowConsumer
from voicewire.server.wire import FRAMES, MSGPACK, UNPACED, Codec


@pytest.fixture
def codec_pool() -> Iterator[CodecPool]:
    """A session's codec thread, stopped after the test (the server's lives as long as its worker)."""
    pool = CodecPool(1)
    yield pool
    pool.shutdown()


@pytest.mark.parametrize("verb", ["text", "flush", "end"])
def test_a_context_the_engine_finished_is_closed_before_its_done(
    tiny_models, codec_pool: CodecPool, verb: str
) -> None:
    """The engine ends a context at max_frames while the session has not yet read its last chunk
    (its pump is not running here): text, flush and end then get `context_closed`, not a crash."""

    async def run() -> ProtocolError:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            session = Session(None, engine, Codec(MSGPACK), ServerConfig(), codec_pool, Metrics())  # type: ignore[arg-type]
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


class _Socket:
    """The socket end of a session's send loop: what it wrote, in order, and in how many sends. With
    `frames`, its WebSocket layer takes many frames in one send, as server.wire.WireProtocol does."""

    def __init__(self, frames: bool = False) -> None:
        self.scope = {"extensions": {FRAMES: {}} if frames else {}}
        self.sent: list[bytes] = []
        self.sends = 0

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)
        self.sends += 1

    async def send(self, message: dict) -> None:
        self.sent.extend(message[FRAMES])
        self.sends += 1


def _histogram(metrics: Metrics, name: str) -> tuple[float, float]:
    """(count, sum) of one of the session's histograms."""
    values = {s.name: s.value for family in metrics.registry.collect() for s in family.samples}
    return values[f"{name}_count"], values[f"{name}_sum"]


@pytest.mark.parametrize("frames", [False, True], ids=["a send each", "frames"])
def test_the_listener_at_the_socket_hears_the_gap_the_send_loop_made(
    tiny_models, codec_pool: CodecPool, frames: bool
) -> None:
    """Each audio message written to the socket feeds its context's player (a 200 ms start buffer):
    240 ms of audio starts it, and a packet 0.6 s later comes after the buffer ran dry at 0.24 s,
    so `socket_player_gap` gets one gap of about 0.36 s. Audio of an unknown context is not played.
    Where the socket takes many frames a send, the messages queued together go in one send."""

    async def run() -> tuple[Metrics, _Socket]:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            socket, metrics = _Socket(frames), Metrics()
            session = Session(socket, engine, Codec(MSGPACK), ServerConfig(), codec_pool, metrics)  # type: ignore[arg-type]
            await session._handle(
                p.Start(type="start", voice={"speaker": "vivian"}, format={"encoding": "pcm_s16le"})
            )
            session.contexts["c"] = Context("c", None, AudioEncoder(session._settings.format))  # type: ignore[arg-type,union-attr]
            rate = session._settings.format.sample_rate  # type: ignore[union-attr]
            packet = rate // 50  # 20 ms

            def audio(context_id: str, seq: int) -> p.Audio:
                return p.Audio(
                    context_id=context_id, seq=seq, pts=seq * packet, samples=packet, data=b"\0\0" * packet
                )

            sender = asyncio.create_task(session._send_loop())
            for seq in range(12):
                session._emit(audio("c", seq))
            session._emit(audio("gone", 0))
            await asyncio.sleep(0.6)
            session._emit(audio("c", 12))
            session._outbox.put_nowait(None)
            await sender
            return metrics, socket

    metrics, socket = asyncio.run(run())
    assert len(socket.sent) == 1 + 14  # ready, then every audio message
    assert [msgpack.unpackb(m)["type"] for m in socket.sent] == ["ready"] + ["audio"] * 14
    assert [msgpack.unpackb(m)["seq"] for m in socket.sent[1:13]] == list(range(12))
    # Ready and the first 13 audio messages were queued before the loop first ran, the last alone.
    assert socket.sends == (2 if frames else 15)
    count, total = _histogram(metrics, "voicewire_socket_player_gap_seconds")
    assert count == 1 and 0.3 < total < 1.5
    # The last packet was queued late too: the gap was there before the send loop.
    count, total = _histogram(metrics, "voicewire_queued_player_gap_seconds")
    assert count == 1 and 0.3 < total < 1.5


class _StallingSocket(_Socket):
    """A socket whose write of its `stall_at`th message (counting from 0) waits `stall_s` first."""

    def __init__(self, stall_at: int, stall_s: float) -> None:
        super().__init__()
        self.stall_at, self.stall_s = stall_at, stall_s

    async def send_bytes(self, data: bytes) -> None:
        if len(self.sent) == self.stall_at:
            await asyncio.sleep(self.stall_s)
        await super().send_bytes(data)


def test_a_gap_the_send_loop_makes_is_heard_at_the_socket_and_not_where_audio_is_queued(
    tiny_models, codec_pool: CodecPool
) -> None:
    """13 packets of 20 ms queued at once reach the queue's player together: 240 ms starts it and
    260 ms never runs dry. The socket stalls 0.6 s before writing the last one, so its player runs
    dry at 0.24 s and hears a gap of about 0.36 s that `queued_player_gap` does not."""

    async def run() -> Metrics:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            socket, metrics = _StallingSocket(stall_at=1 + 12, stall_s=0.6), Metrics()
            session = Session(socket, engine, Codec(MSGPACK), ServerConfig(), codec_pool, metrics)  # type: ignore[arg-type]
            await session._handle(
                p.Start(type="start", voice={"speaker": "vivian"}, format={"encoding": "pcm_s16le"})
            )
            session.contexts["c"] = Context("c", None, AudioEncoder(session._settings.format))  # type: ignore[arg-type,union-attr]
            packet = session._settings.format.sample_rate // 50  # type: ignore[union-attr]
            sender = asyncio.create_task(session._send_loop())
            for seq in range(13):
                session._emit(
                    p.Audio(context_id="c", seq=seq, pts=seq * packet, samples=packet, data=b"\0\0" * packet)
                )
            session._outbox.put_nowait(None)
            await sender
            assert len(socket.sent) == 1 + 13  # ready, then every audio message
            return metrics

    metrics = asyncio.run(run())
    assert _histogram(metrics, "voicewire_queued_player_gap_seconds") == (0, 0)
    count, total = _histogram(metrics, "voicewire_socket_player_gap_seconds")
    assert count == 1 and 0.3 < total < 1.5


def test_a_context_s_first_packet_goes_out_before_the_codec_threads_encode_the_rest(
    tiny_models, codec_pool: CodecPool
) -> None:
    """With the codec thread busy, a context's first Opus packet still reaches the socket: it is
    encoded on the session's loop. The rest of its first chunk follows once the thread is free,
    and the packets run on in seq and pts as if the chunk had been encoded at once."""

    async def run() -> list[dict]:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            socket = _Socket()
            session = Session(socket, engine, Codec(MSGPACK), ServerConfig(), codec_pool, Metrics())  # type: ignore[arg-type]
            busy = threading.Event()
            codec_pool.submit(busy.wait, 60)
            await session._handle(
                p.Start(type="start", voice={"speaker": "vivian"}, max_frames=4, suppress_eos=True)
            )
            sender = asyncio.create_task(session._send_loop())
            await session._handle(p.Text(type="text", context_id="c", text="Hello there, "))
            await session._handle(p.End(type="end", context_id="c"))

            def audio() -> list[dict]:
                messages = [msgpack.unpackb(m) for m in socket.sent]
                return [m for m in messages if m["type"] == "audio"]

            for _ in range(600):
                if audio():
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # time for more, were any to come
            early = audio()
            busy.set()
            await session.contexts["c"].pump
            session._outbox.put_nowait(None)
            await sender
            assert [(m["seq"], m["pts"], m["samples"]) for m in early] == [(0, 0, 960)]
            return audio()

    packets = asyncio.run(run())
    assert [m["seq"] for m in packets] == list(range(len(packets))) and len(packets) > 4
    assert [m["pts"] for m in packets] == [960 * i for i in range(len(packets))]


class _StuckSocket:
    """A socket whose client stopped reading: ordinary sends wait forever; an UNPACED send and the
    close are written at once (as server.wire.WireProtocol writes them)."""

    def __init__(self) -> None:
        self.scope = {"extensions": {FRAMES: {}}}  # as the server's socket (server.wire.WireProtocol)
        self.written: list[tuple[str, object]] = []

    async def send_bytes(self, data: bytes) -> None:
        await asyncio.Event().wait()

    async def send(self, message: dict) -> None:
        if not message.get(UNPACED):
            await asyncio.Event().wait()
        self.written.append(("send", message["bytes"]))

    async def close(self, code: int) -> None:
        self.written.append(("close", code))


def test_a_slow_consumer_is_told_first_and_closed(tiny_models, codec_pool: CodecPool) -> None:
    """Cut off with audio still queued: the queue is dropped, the fatal error is written at once
    (not behind the audio the client is not reading), then the close with 1008."""

    async def run() -> tuple[_StuckSocket, Metrics]:
        with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
            socket, metrics = _StuckSocket(), Metrics()
            config = ServerConfig(send_queue=8)
            session = Session(socket, engine, Codec(MSGPACK), config, codec_pool, metrics)  # type: ignore[arg-type]
            await session._handle(p.Start(type="start", voice={"speaker": "vivian"}))
            sender = asyncio.create_task(session._send_loop())
            with pytest.raises(_SlowConsumer):
                for seq in range(config.send_queue + 2):  # the first is taken by the stuck sender
                    session._emit(p.Pong(id=str(seq)))
            assert session._outbox.full()
            await session._shutdown(sender)
            assert session._outbox.empty() and sender.cancelled()
            return socket, metrics

    socket, metrics = asyncio.run(run())
    assert [kind for kind, _ in socket.written] == ["send", "close"]
    error = msgpack.unpackb(socket.written[0][1])
    assert (error["type"], error["code"], error["fatal"]) == ("error", "slow_consumer", True)
    assert socket.written[1] == ("close", 1008)
    values = {
        s.name + str(s.labels): s.value for family in metrics.registry.collect() for s in family.samples
    }
    assert values["voicewire_errors_total{'code': 'slow_consumer'}"] == 1


def test_a_chunk_is_due_when_its_listener_runs_dry_within_the_horizon_and_a_last_chunk_now() -> None:
    """The codec threads' order (server.codec_pool): a context not yet playing is due now, a
    playing one when its audio runs out, but never later than the horizon from now (beyond it,
    first come first served), and a stream's last chunk now, as its client waits for `done`.
    A horizon of 0 is the order chunks came in."""

    def chunk(final: bool = False) -> AudioChunk:
        empty = np.zeros((0, 16), dtype=np.int64)
        return AudioChunk(np.zeros(1920, np.float32), 0, empty, np.zeros(0, np.int64), "", 0, final=final)

    horizon = ServerConfig().codec_horizon_s
    assert horizon == 1.0
    context = Context("c", None, AudioEncoder(OutputFormat("opus", 24000)))
    assert context.due(chunk(), 10.0, horizon) == 10.0  # nothing played yet
    context.player.add(10.0, 0.5)  # starts at 10.0, plays to 10.5
    assert context.due(chunk(), 10.1, horizon) == 10.5
    assert context.due(chunk(), 11.0, horizon) == 10.5  # dry since 10.5: ahead of anything due now
    context.player.add(11.0, 3.0)  # plays to 14.0
    assert context.due(chunk(), 11.0, horizon) == 12.0  # 3 s in hand, the horizon 1 s
    assert context.due(chunk(), 11.0, 0.25) == 11.25
    assert context.due(chunk(), 11.0, 0.0) == 11.0  # first come, first served
    assert context.due(chunk(), 12.5, 0.0) == 12.5
    assert context.due(chunk(final=True), 11.0, horizon) == 11.0
