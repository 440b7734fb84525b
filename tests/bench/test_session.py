"""A `voicewire bench` session: its simulated player, and a session the server refuses."""

import asyncio

import msgpack
import pytest
from websockets.asyncio.server import ServerConnection, serve

from tests.server.conftest import running_server
from voicewire.bench.load import Load
from voicewire.bench.session import Underruns, run_sessions, simulated_underruns
from voicewire.server.config import ServerConfig


def test_the_simulated_player_counts_gaps() -> None:
    steady = [(0.1 * i, 0.1) for i in range(20)]  # arrives exactly as fast as it plays
    assert simulated_underruns(steady) == Underruns(0, 0.0, ())
    late = [(0.0, 0.1), (0.05, 0.1), (0.1, 0.1), (1.0, 0.1), (1.05, 0.1), (2.0, 0.1)]
    # Starts at 0.05 with 0.2 s: plays to 0.35 (with the third piece), waits for the fourth at 1.0,
    # having played 0.3 s; then plays to 1.2 and waits for the sixth, having played 0.5 s.
    assert simulated_underruns(late) == Underruns(2, 1.45, (0.3, 0.5))
    assert simulated_underruns([(0.0, 0.05)]) == Underruns(0, 0.0, ())  # never reached its start buffer


def test_a_level_larger_than_the_servers_slots_stops_saying_why(tiny_models) -> None:
    # 8 slots (running_server's engine), 10 sessions at once, a slot wait of 0.2 s: two contexts are
    # refused with engine_full. The level ended there, not waiting for a `done` that never comes.
    with running_server(tiny_models["custom_voice"], ServerConfig(slot_wait_s=0.2)) as server:
        load = Load(server.url, frames=60, rate=0.0, speaker="vivian", cancel_every=0)
        with pytest.raises(RuntimeError, match="'code': 'engine_full'"):
            asyncio.run(asyncio.wait_for(run_sessions(load, list(range(10))), 120))
        # A session whose voice the checkpoint refuses stops the level too (no such speaker).
        load = Load(server.url, frames=60, rate=0.0, speaker="nobody", cancel_every=0)
        with pytest.raises(RuntimeError, match="'code': 'invalid_voice'"):
            asyncio.run(asyncio.wait_for(run_sessions(load, [0]), 120))


def test_context_closed_for_text_after_the_end_is_not_a_failure() -> None:
    # Text the bench feeds after its context reached max_frames, or after its own cancel, is
    # answered context_closed ahead of the done (seen in CI under load). The session goes on to
    # its done. Written here as the real server can send it, since the race is rare on its own.
    async def answer(ws: ServerConnection) -> None:
        start = msgpack.unpackb(await ws.recv())
        assert start["type"] == "start"
        await ws.send(msgpack.packb({"type": "ready", "sample_rate": 48000}))
        audio = {"type": "audio", "context_id": "c", "seq": 0, "pts": 0, "samples": 24000, "data": b"x"}
        await ws.send(msgpack.packb(audio))
        closed = {"type": "error", "code": "context_closed", "message": "context 'c' is finished"}
        await ws.send(msgpack.packb({**closed, "context_id": "c", "fatal": False}))
        await ws.send(msgpack.packb({"type": "done", "context_id": "c", "reason": "max_frames"}))
        await ws.wait_closed()

    async def run() -> list:
        async with serve(answer, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            load = Load(f"ws://127.0.0.1:{port}", frames=6, rate=0.0, speaker="vivian", cancel_every=0)
            return await asyncio.wait_for(run_sessions(load, [0]), 30)

    (run_,) = asyncio.run(run())
    assert run_.done_s is not None and run_.audio_s == 0.5
