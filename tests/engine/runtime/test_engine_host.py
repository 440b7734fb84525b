"""The engine process's side (engine_host.py), spoken to by a server of our own on the wire:
batches written by hand, events read as they come."""

import asyncio
import os
import pickle
import struct
import time
from multiprocessing.connection import Client, Connection

import numpy as np

from tests.engine.runtime.conftest import GREEDY, TEXT, fill_every_slot, until
from tests.engine.streaming import speak
from voicewire.engine.config import StreamOptions
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime import engine_wire as wire
from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.engine.runtime.stream import Mark, StreamResult
from voicewire.engine.runtime.text_stream import IncrementalTokenizer, PackedTokens


def _join(remote: EngineProcess) -> tuple[Connection, TextTokenizer]:
    """A server of our own on the wire: batches written by hand, events read as they come. The
    engine's greeting brings its text tokenizer."""
    conn = Client(remote.address, family="AF_UNIX", authkey=remote.authkey)
    ready = pickle.loads(conn.recv_bytes())
    assert isinstance(ready, wire.Ready)
    return conn, ready.tokenizer


def _say(
    tokenizer: TextTokenizer, stream_id: int, pieces: list[str], last: Mark | None = Mark.END
) -> list[wire.Tokens]:
    """A stream's text as a server sends it: each piece's committed tokens, then `last` with the tail."""
    committed = IncrementalTokenizer(tokenizer)
    said = [wire.Tokens(stream_id, PackedTokens.of(committed.push(piece))) for piece in pieces]
    if last is not None:
        said.append(wire.Tokens(stream_id, PackedTokens.of(committed.flush()), last))
    return said


def _events(conn: Connection, until, timeout: float = 30) -> list[object]:
    events: list[object] = []
    deadline = time.monotonic() + timeout
    while not until(events):
        assert conn.poll(max(0.0, deadline - time.monotonic())), f"timed out; heard {events}"
        batch = wire.read(conn)
        assert isinstance(batch, wire.Events) and batch.sent_at <= time.monotonic()
        events.extend(batch.events)
    return events


def _samples(events: list[object], stream_id: int) -> int:
    return sum(e.chunk.pcm.shape[0] for e in events if isinstance(e, wire.Chunk) and e.stream_id == stream_id)


def _finished(events: list[object]) -> dict[int, StreamResult]:
    return {e.stream_id: e.result for e in events if isinstance(e, wire.Finished)}


def test_one_batch_opens_speaks_cancels_and_calls_in_order(remote: EngineProcess) -> None:
    async def as_a_handle_speaks():
        voice = await remote.voice(speaker="serena")
        return voice, await speak(remote.open_stream(voice, GREEDY), [TEXT[:30], TEXT[30:]])

    voice, expected = asyncio.run(as_a_handle_speaks())
    long = StreamOptions(max_frames=10_000, suppress_eos=True)
    conn, tokenizer = _join(remote)
    requests = [
        wire.Open(1, voice, GREEDY),
        *_say(tokenizer, 1, [TEXT[:30], TEXT[30:]]),
        wire.Open(2, voice, long),
        *_say(tokenizer, 2, [TEXT], last=None),
        wire.Cancel(2),
        wire.Call(3, "check_voice", (voice,), {}),
        *_say(tokenizer, 9, ["a stream the engine does not know"]),
    ]
    try:
        # Stream 1's acknowledgement comes with its open: all of its audio, read ahead of time.
        conn.send_bytes(pickle.dumps((requests, {1: 30 * 1920})))
        events = _events(
            conn, lambda heard: len(_finished(heard)) == 2 and any(isinstance(e, wire.Reply) for e in heard)
        )
    finally:
        conn.close()
    results = _finished(events)
    assert results[1].reason == "max_frames" and results[1].samples_generated == 30 * 1920
    assert results[2].reason == "cancelled"
    assert [e for e in events if isinstance(e, wire.Reply)] == [wire.Reply(3, None, None)]
    chunks = [e.chunk for e in events if isinstance(e, wire.Chunk) and e.stream_id == 1]
    np.testing.assert_array_equal(np.concatenate([c.codes for c in chunks]), expected.codes)
    assert [c.text for c in chunks] == [c.text for c in expected.chunks]


def test_acknowledgements_in_a_batch_let_a_stream_read_ahead_go_on(remote: EngineProcess) -> None:
    voice = asyncio.run(remote.voice(speaker="serena"))
    conn, tokenizer = _join(remote)
    try:
        conn.send_bytes(pickle.dumps(([wire.Open(1, voice, GREEDY), *_say(tokenizer, 1, [TEXT])], {})))
        events = _events(conn, lambda heard: _samples(heard, 1) >= 24_000)  # one second buffered
        while conn.poll(1.0):  # until it stops for want of a reader
            events.extend(wire.read(conn).events)
        assert 24_000 <= _samples(events, 1) < 30 * 1920 and not _finished(events)
        conn.send_bytes(pickle.dumps(([], {1: 30 * 1920})))
        events += _events(conn, lambda heard: 1 in _finished(heard))
    finally:
        conn.close()
    assert _samples(events, 1) == 30 * 1920 and _finished(events)[1].reason == "max_frames"


def test_a_server_that_dies_mid_batch_has_its_streams_cancelled(remote: EngineProcess) -> None:
    voice = asyncio.run(remote.voice(speaker="ryan"))
    long = StreamOptions(max_frames=10_000, suppress_eos=True)
    conn, tokenizer = _join(remote)
    opens = [
        r for i in (1, 2, 3) for r in (wire.Open(i, voice, long), *_say(tokenizer, i, [TEXT], last=None))
    ]
    conn.send_bytes(pickle.dumps((opens, {})))
    until(lambda: remote.live_streams == 3, 30)  # every server hears that the engine is full
    # Half a message, then gone: the length says 1,000 bytes, 7 come.
    os.write(conn.fileno(), struct.pack("!i", 1000) + b"partial")
    conn.close()
    until(lambda: remote.live_streams < 3, 30)  # ... and that it is full no more
    fill_every_slot(remote)
