"""One `voicewire bench` session at the client: its WebSocket, what it measured (`SessionRun`), a
stream's sessions back to back, and the gaps a player would have heard in its audio
(`simulated_underruns`). The client processes import it, so torch stays out of the top level."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgpack
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from voicewire.bench.load import Load, start_message, text_pieces


@dataclass
class SessionRun:
    stream: int = 0  # the stream index (concurrency slot) that ran this session
    probe: bool = False  # cancelled on purpose after its first 0.4 s (cancel latency)
    setup_s: float | None = None  # from connecting to `ready`: in a closed loop, the gap between sessions
    first_audio_s: float | None = None
    sent_s: list[float] = field(default_factory=list)  # when each text message, then `end`, was sent
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (time, audio seconds)
    done_s: float | None = None
    audio_s: float = 0.0
    cancel_s: float | None = None
    ended_at: float | None = None  # time.time() at `done` or `cancelled` (one clock for all processes)
    started_at: float | None = None  # time.time() when it connected
    late_s: float = 0.0  # on a schedule (Load.session_interval_s): how long it waited for the one before


async def _session(load: Load, index: int, seed: int, cancel: bool) -> SessionRun:
    run = SessionRun(stream=index, probe=cancel)
    rate = load.rate
    run.started_at, connecting = time.time(), time.perf_counter()
    async with connect(
        f"{load.url}/v1/stream", subprotocols=[Subprotocol("voicewire.v1.msgpack")], max_size=2**22
    ) as ws:
        await ws.send(msgpack.packb(start_message(load, seed)))
        ready = msgpack.unpackb(await ws.recv())
        if ready["type"] != "ready":
            raise RuntimeError(f"session {index}: {ready}")
        rate_hz = ready["sample_rate"]
        run.setup_s = time.perf_counter() - connecting
        pieces = text_pieces(rate)
        began = time.perf_counter()

        async def feed() -> None:
            for i, piece in enumerate(pieces):
                if rate > 0:
                    await asyncio.sleep(max(0.0, began + i / rate - time.perf_counter()))
                run.sent_s.append(time.perf_counter() - began)
                await ws.send(msgpack.packb({"type": "text", "context_id": "c", "text": piece}))
            run.sent_s.append(time.perf_counter() - began)
            await ws.send(msgpack.packb({"type": "end", "context_id": "c"}))

        feeder = asyncio.create_task(feed())
        cancel_sent = None
        async for frame in ws:
            message = msgpack.unpackb(frame)
            now = time.perf_counter() - began
            kind = message["type"]
            if kind == "audio":
                run.first_audio_s = run.first_audio_s if run.first_audio_s is not None else now
                seconds = message["samples"] / rate_hz
                run.arrivals.append((now, seconds))
                run.audio_s += seconds
                if cancel and cancel_sent is None and run.audio_s >= 0.4:
                    cancel_sent = now
                    await ws.send(msgpack.packb({"type": "cancel", "context_id": "c"}))
            elif kind == "done":
                run.done_s, run.ended_at = now, time.time()
                break
            elif kind == "cancelled":
                run.cancel_s = now - (cancel_sent or now)
                run.done_s, run.ended_at = now, time.time()
                break
            elif kind == "error" and message.get("code") != "context_closed":
                # Refused (a voice the checkpoint lacks; engine_full: a level larger than the
                # server's slots and its slot wait): no `done` follows, so the level stops here.
                # Not context_closed: text still fed after the context reached its max_frames, or
                # after this session's own cancel; its `done` or `cancelled` comes all the same.
                raise RuntimeError(f"session {index}: {message}")
        feeder.cancel()
    return run


async def _stream(load: Load, index: int, streams: int, began: float) -> list[SessionRun]:
    """One stream index's sessions, in turn. Back to back, or with `load.session_interval_s` on a
    schedule from `began` (time.perf_counter()): session i at (index / streams + i) intervals, so
    the streams' starts are spread evenly; one whose predecessor is still open starts at its end,
    late. Session n overall (stream index × K + i) is a cancel probe if n % cancel_every ==
    cancel_every - 1, whichever process runs it: with K > 1 every stream runs about as much audio,
    so all N stay busy to the level's end."""
    k, every, interval = load.sessions_per_stream, load.cancel_every, load.session_interval_s
    runs = []
    free = began  # when the stream's session before ended
    for i in range(k):
        n = index * k + i
        late = 0.0
        if interval > 0:
            due = began + (index / streams + i) * interval
            late = max(0.0, free - due)  # the one before ran past this one's start
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        run = await _session(load, index, n, every > 0 and n % every == every - 1)
        run.late_s, free = late, time.perf_counter()
        runs.append(run)
    return runs


async def run_sessions(load: Load, indices: list[int], streams: int | None = None) -> list[SessionRun]:
    """The sessions of the stream `indices` of a level of `streams` (None: as many as `indices`),
    all at once in this event loop; by stream, then in order."""
    began = time.perf_counter()
    count = streams or len(indices)
    runs = await asyncio.gather(*(_stream(load, i, count, began) for i in indices))
    return [run for stream_runs in runs for run in stream_runs]


@dataclass(frozen=True)
class Underruns:
    count: int
    gap_s: float  # the total
    played_s: tuple[float, ...]  # the audio played before each gap


def simulated_underruns(arrivals: list[tuple[float, float]]) -> Underruns:
    """The gaps a player with the engine's start buffer (`playback.START_BUFFER_S`) would hear, over
    a session's (arrival time, audio seconds): the same player the engine runs at its decoder's
    output. Imported here, in the parent: importing voicewire.engine loads torch, which the client
    processes do without."""
    from voicewire.engine.runtime.playback import SimulatedPlayer

    player = SimulatedPlayer()
    for at, seconds in arrivals:
        player.add(at, seconds)
    gaps = player.gaps
    return Underruns(len(gaps), round(sum(g for _, g in gaps), 3), tuple(round(p, 3) for p, _ in gaps))
