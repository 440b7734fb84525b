"""`voicewire bench`: the service benchmark. N concurrent WebSocket sessions against a real server,
text at an LLM-like pace (or all at once), Opus back; measured at the client:

- first audio latency (first text sent -> first audio message), p50/p95/p99; and the same from the
  moment the text that fills the engine's lookahead had been sent (the first `lookahead_tokens`
  tokens, as the server's checkpoint's tokenizer cuts the text; all of it if shorter): the part of
  first audio that is the server's, whatever the text's pace;
- speed against real time per stream (audio seconds / seconds from first text to `done`), p50
  and its slow tail (p5, p1, min);
- underruns of a simulated player that starts after 200 ms of audio and then plays in real time
  (count, total gap, and how much audio each stream had played before each gap: near the start
  buffer means a stream's first chunks came too far apart, later means its steady pace fell short);
- cancel latency (cancel sent -> `cancelled`), on every fourth session (`cancel_every`), after its
  first 0.4 s of audio; spread over the streams' sessions, so with K > 1 every stream stays open;
- aggregate audio seconds per wall second, and when sessions ended after the level's start (all
  of them, and the last of each client process), which shows a tail the medians hide;
- each session's setup (connect to `ready`), the client's share of the gap between back-to-back
  sessions, and each client process's CPU share, which says whether the client limited the level;
- with `sessions_per_stream` K > 1, each of the N streams runs K sessions back to back, so N stay
  open at all times (a closed-loop load): the ramp at the level's start and the tail at its end
  then weigh 1/K as much in the aggregate, as under a server's steady traffic;
- and from the server's `/metrics` before and after the level, the engine's view of the same
  sessions (`engine`): first frame, first chunk, step and decoder-call times, and batch sizes; the
  server's way from the engine to the socket (`server`: each chunk's delivery time, and the gaps a
  listener at the socket would hear); and how many of them each server process (worker) took.

One Python process can only send and receive so much: at 256 streams the client alone makes ~5000 text
sends a second. A level can therefore spread its sessions over several client processes (spawned), which
all start at one agreed wall-clock moment so the sessions overlap as they would in one process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import multiprocessing
import os
import time
import traceback
import urllib.request
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING

import msgpack
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from voicewire.bench.model import BenchModel
from voicewire.server.protocol import BufferingSpec

if TYPE_CHECKING:  # voicewire.engine brings torch, which the client processes do without
    from voicewire.engine.model.text_tokenizer import TextTokenizer

log = logging.getLogger(__name__)

STREAMS_PER_CLIENT_PROCESS = 64  # the automatic choice: one client process per this many streams...
CPUS_PER_CLIENT_PROCESS = 4  # ...and at most one per this many CPUs, leaving the rest to a local server
CLIENT_START_TIMEOUT_S = 120.0  # spawn + imports, on a loaded machine
CLIENT_START_MARGIN_S = 0.2  # from the parent's "go" to the common start: covers sending it to every worker
TEXT = (
    "Thanks for calling. I found your order, and it shipped this morning. It should arrive on "
    "Thursday between nine and noon. Is there anything else I can help you with today? "
)
# Text tokens a segment waits for before its first frame: the engine's default (EngineConfig's
# lookahead_tokens, also every configs/*.yaml's). Every session asks for it in `start`, so the
# bench knows which text completes the lookahead whatever the server's own setting.
LOOKAHEAD_TOKENS = 3


def check_chunks(chunks: tuple[int, ...]) -> None:
    """A chunk schedule the protocol's `buffering` accepts: a first chunk and 1-8 more, 1-32 frames each."""
    if len(chunks) >= 2:
        try:
            BufferingSpec(first_chunk_frames=chunks[0], chunk_frames=list(chunks[1:]))
            return
        except ValueError:  # pydantic's ValidationError is one
            pass
    raise ValueError(
        f"chunks needs a first chunk and 1-8 more, each 1-32 frames, not {','.join(map(str, chunks))}"
    )


def check_cancel_every(n: int, name: str = "cancel_every") -> None:
    """A cancel spacing `Load` accepts: 0 (no cancels) or more; `name` is what the caller calls it."""
    if n < 0:
        raise ValueError(f"{name} must be 0 (no cancels) or more, not {n}")


@dataclass(frozen=True)
class Load:
    """What every session of a level does: the server it talks to, its forced frame count, its text
    pace (words/s, 0 = all at once), the speaker, how many sessions each stream runs back to back,
    the chunk schedule it asks for (frames of the first chunk, then of the next ones; None: the
    server's), and which sessions are cancelled after their first 0.4 s of audio: every
    `cancel_every`-th, counting stream by stream (0: none); and the text lookahead it asks for."""

    url: str
    frames: int
    rate: float
    speaker: str | None
    sessions_per_stream: int = 1
    chunks: tuple[int, ...] | None = None
    cancel_every: int = 4
    lookahead_tokens: int = LOOKAHEAD_TOKENS

    def __post_init__(self) -> None:
        if self.lookahead_tokens < 1:
            raise ValueError(f"lookahead_tokens must be at least 1, not {self.lookahead_tokens}")
        if self.sessions_per_stream < 1:
            raise ValueError(f"sessions_per_stream must be at least 1, not {self.sessions_per_stream}")
        check_cancel_every(self.cancel_every)
        if self.chunks is not None:
            check_chunks(self.chunks)


@dataclass
class _Run:
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


@dataclass
class LevelRuns:
    """What a level's sessions measured: one run per session, by stream index, then in order."""

    runs: list[_Run]
    wall_s: float  # from the common start to the last session's end
    client_processes: int
    started_at: float  # time.time() at the common start
    client_cpu_s: list[float] = field(default_factory=list)  # each spawned client process's CPU time


def default_client_processes(streams: int) -> int:
    """One client process per 64 streams, but no more than a quarter of the CPUs: 1 for small levels."""
    by_cpus = max(1, (os.cpu_count() or 1) // CPUS_PER_CLIENT_PROCESS)
    return min(by_cpus, math.ceil(streams / STREAMS_PER_CLIENT_PROCESS))


def _percentiles(values: list[float], low: bool = False) -> dict[str, float | None]:
    """p50 and the tail: the high one (p95, p99, max) for latencies, or with `low` the low one (p5,
    p1, min) for figures where less is worse (speed)."""
    qs, extreme = (("p50", "p5", "p1"), "min") if low else (("p50", "p95", "p99"), "max")
    if not values:
        return dict.fromkeys((*qs, extreme))
    array = np.asarray(values, dtype=np.float64)
    found: dict[str, float | None] = {q: round(float(np.percentile(array, int(q[1:]))), 2) for q in qs}
    found[extreme] = round(float(array.min() if low else array.max()), 2)
    return found


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


def _http(url: str) -> str:
    """The server's HTTP base URL for its WebSocket URL (ws:// or wss://)."""
    return "http" + url.removeprefix("ws")


def _scrape(url: str) -> str:
    """The server's /metrics exposition now."""
    with urllib.request.urlopen(f"{_http(url)}/metrics", timeout=30) as response:
        return response.read().decode()


def sessions_by_process(exposition: str) -> dict[str, float]:
    """Sessions each server process has opened so far, by process id (empty for older servers)."""
    for family in text_string_to_metric_families(exposition):
        if family.name == "voicewire_sessions_opened":
            return {s.labels["process"]: s.value for s in family.samples if s.name.endswith("_total")}
    return {}


def process_shares(before: dict[str, float], after: dict[str, float]) -> list[int]:
    """The sessions each server process opened between two `sessions_by_process`, largest first."""
    return sorted(
        (int(n - before.get(p, 0.0)) for p, n in after.items() if n > before.get(p, 0.0)), reverse=True
    )


def first_speaker(url: str) -> str | None:
    """The server's first named speaker (GET /v1/voices), or None for checkpoints without any."""
    with urllib.request.urlopen(f"{_http(url)}/v1/voices", timeout=30) as response:
        voices = json.load(response)["voices"]
    return voices[0]["id"] if voices else None


def start_message(load: Load, seed: int) -> dict:
    """A session's `start`: Opus at 48 kHz, the forced frame count, the text lookahead, and the
    chunk schedule if set."""
    buffering: dict[str, object] = {"lookahead_tokens": load.lookahead_tokens}
    if load.chunks is not None:
        buffering |= {"first_chunk_frames": load.chunks[0], "chunk_frames": list(load.chunks[1:])}
    return {
        "type": "start",
        "voice": {"speaker": load.speaker} if load.speaker else {},
        "format": {"encoding": "opus", "sample_rate": 48000},
        "sampling": {"seed": seed},
        "max_frames": load.frames,
        "suppress_eos": True,
        "buffering": buffering,
    }


def text_pieces(rate: float) -> list[str]:
    """The text messages of a session: TEXT a word at a time (each with its space), or all at once."""
    if rate <= 0:
        return [TEXT]
    words = TEXT.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


@dataclass(frozen=True)
class Lookahead:
    """Which send completed a session's text lookahead: the `messages`-th text message, or with
    `at_end` the `end` after all `messages` (the text held fewer than `tokens` tokens)."""

    tokens: int
    messages: int
    at_end: bool

    @property
    def send(self) -> int:
        """Its index in `_Run.sent_s`, where `end` follows the text messages."""
        return self.messages if self.at_end else self.messages - 1


def lookahead_send(tokenizer: TextTokenizer, pieces: list[str], tokens: int) -> Lookahead:
    """The send after which the engine held `tokens` text tokens of `pieces`: it commits a word's
    tokens once the text after it shows the word is whole (engine/runtime/text_stream.py), and the rest at
    `end`; a segment starts with `tokens` committed (the scheduler's lookahead) or at its end."""
    from voicewire.engine.runtime.text_stream import IncrementalTokenizer  # torch: the parent only

    committed = IncrementalTokenizer(tokenizer)
    held = 0
    for i, piece in enumerate(pieces):
        held += len(committed.push(piece))
        if held >= tokens:
            return Lookahead(tokens, i + 1, at_end=False)
    return Lookahead(tokens, len(pieces), at_end=True)


def server_tokenizer(url: str) -> TextTokenizer | None:
    """The text tokenizer of the server's checkpoint (its folder, from GET /ready), or None when the
    folder is not on this machine or the server is not ready."""
    from voicewire.engine.model.text_tokenizer import cached_tokenizer

    try:
        with urllib.request.urlopen(f"{_http(url)}/ready", timeout=30) as response:
            folder = json.load(response)["model"]
    except (OSError, KeyError, ValueError) as exc:  # HTTPError (503: not ready) is an OSError
        log.warning("no first audio from the lookahead: GET /ready gave no checkpoint folder (%s)", exc)
        return None
    if not Path(folder).is_dir():
        log.warning("no first audio from the lookahead: the server's checkpoint %s is not here", folder)
        return None
    return cached_tokenizer(folder)


async def _session(load: Load, index: int, seed: int, cancel: bool) -> _Run:
    run = _Run(stream=index, probe=cancel)
    rate = load.rate
    connecting = time.perf_counter()
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
            elif kind == "error" and message.get("fatal"):
                raise RuntimeError(f"session {index}: {message}")
        feeder.cancel()
    return run


async def _stream(load: Load, index: int) -> list[_Run]:
    """One stream index's sessions, back to back. Session n overall (stream index × K + i) is a
    cancel probe if n % cancel_every == cancel_every - 1, whichever process runs it: with K > 1
    every stream runs about as much audio, so all N stay busy to the level's end."""
    k, every = load.sessions_per_stream, load.cancel_every
    runs = []
    for i in range(k):
        n = index * k + i
        runs.append(await _session(load, index, n, every > 0 and n % every == every - 1))
    return runs


async def _sessions(load: Load, indices: list[int]) -> list[_Run]:
    streams = await asyncio.gather(*(_stream(load, i) for i in indices))
    return [run for runs in streams for run in runs]


def _client_process(pipe: Connection, load: Load, indices: list[int]) -> None:
    """A spawned client: says it is ready, waits for the common start time, runs its sessions and
    sends back ("done", (runs, end time, CPU seconds)) or ("error", traceback)."""
    try:
        pipe.send(("ready", None))
        start_at = pipe.recv()
        time.sleep(max(0.0, start_at - time.time()))
        cpu = time.process_time()
        runs = asyncio.run(_sessions(load, indices))
        pipe.send(("done", (runs, time.time(), time.process_time() - cpu)))
    except BaseException:
        pipe.send(("error", traceback.format_exc()))
    finally:
        pipe.close()


def _receive_all(pipes: list[Connection], expected: str, timeout: float | None) -> list:
    """One `expected` message from every worker's pipe; a worker's error, exit or silence raises."""
    deadline = None if timeout is None else time.monotonic() + timeout
    results: list = [None] * len(pipes)
    pending = dict(enumerate(pipes))
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait(list(pending.values()), timeout=left)
        if not ready:
            raise RuntimeError(
                f"bench client processes {sorted(pending)} sent no '{expected}' in {timeout} s"
            )
        for worker, pipe in list(pending.items()):
            if pipe not in ready:
                continue
            try:
                kind, payload = pipe.recv()
            except EOFError:  # it died without a word (killed, out of memory)
                raise RuntimeError(f"bench client process {worker} exited without a result") from None
            if kind == "error":
                summary = payload.strip().splitlines()[-1]  # the exception, ahead of its traceback
                raise RuntimeError(f"bench client process {worker} failed: {summary}\n{payload}")
            results[worker] = payload
            del pending[worker]
    return results


def _run_in_processes(load: Load, streams: int, processes: int) -> LevelRuns:
    context = multiprocessing.get_context("spawn")  # fork would copy the parent's threads (a local server)
    shares = [list(range(worker, streams, processes)) for worker in range(processes)]  # round-robin
    pipes: list[Connection] = []
    workers: list[multiprocessing.process.BaseProcess] = []
    try:
        for worker, share in enumerate(shares):
            pipe, child = context.Pipe()
            process = context.Process(
                target=_client_process,
                args=(child, load, share),
                name=f"voicewire-bench-client-{worker}",
                daemon=True,
            )
            process.start()
            child.close()  # so the parent's recv sees EOF if the worker dies
            pipes.append(pipe)
            workers.append(process)
        _receive_all(pipes, "ready", CLIENT_START_TIMEOUT_S)
        # Every worker is up and waiting: agree on one start, a moment from now.
        start_at = time.time() + CLIENT_START_MARGIN_S
        for pipe in pipes:
            pipe.send(start_at)
        results = _receive_all(pipes, "done", timeout=None)
    finally:
        for worker_process in workers:
            if worker_process.is_alive():
                worker_process.terminate()
            process.join()
        for pipe in pipes:
            pipe.close()
    runs = sorted((run for share_runs, _, _ in results for run in share_runs), key=lambda run: run.stream)
    wall = max(end for _, end, _ in results) - start_at
    return LevelRuns(runs, wall, processes, start_at, [cpu for _, _, cpu in results])


async def run_level(load: Load, streams: int, processes: int = 1) -> LevelRuns:
    """One concurrency level's sessions (`load.sessions_per_stream` back to back on each of
    `streams`): in this event loop when `processes` is 1, otherwise spread round-robin by stream
    index over that many spawned client processes (at most one per stream)."""
    processes = max(1, min(processes, streams))
    if processes == 1:
        began, started_at = time.perf_counter(), time.time()
        runs = await _sessions(load, list(range(streams)))
        return LevelRuns(runs, time.perf_counter() - began, 1, started_at)
    log.info("%d streams over %d client processes", streams, processes)
    return await asyncio.to_thread(_run_in_processes, load, streams, processes)


def level_report(
    streams: int,
    frames: int,
    rate: float,
    level: LevelRuns,
    engine: dict | None = None,
    server_processes: list[int] | None = None,
    server: dict | None = None,
    server_cores: dict | None = None,
    lookahead: Lookahead | None = None,
) -> dict:
    """The JSON report of one level's runs, with the engine's view (`histogram_report`), the
    sessions each server process took (`process_shares`), the server's way from the engine to
    the socket (`histogram_report` of `SERVER_HISTOGRAMS`), the cores its processes used
    (`cores_used`) and first audio from the send that completed the lookahead (`lookahead_send`)
    if given."""
    from voicewire.engine.runtime.playback import START_BUFFER_S  # as in simulated_underruns

    runs, wall = level.runs, level.wall_s
    full = [r for r in runs if not r.probe]  # sessions that ran to the end
    underruns = [simulated_underruns(r.arrivals) for r in full]
    ends = [None if r.ended_at is None else r.ended_at - level.started_at for r in runs]
    processes = level.client_processes
    # Streams go round-robin: process k ran stream indices k, k + P, ...
    last_end = [0.0] * processes
    for run, end in zip(runs, ends, strict=True):
        if end is not None:
            last_end[run.stream % processes] = max(last_end[run.stream % processes], end)
    # From the send that completed the lookahead; a session cancelled or failed before it sent that
    # has no figure (a probe is cancelled after its first audio, so after it in practice).
    from_lookahead = [
        (r.first_audio_s - r.sent_s[lookahead.send]) * 1000
        for r in runs
        if lookahead is not None and r.first_audio_s is not None and len(r.sent_s) > lookahead.send
    ]
    return {
        "streams": streams,
        "sessions_per_stream": len(runs) // max(streams, 1),
        "frames_per_stream": frames,
        "text_rate_words_per_s": rate,
        "first_audio_ms": _percentiles([r.first_audio_s * 1000 for r in runs if r.first_audio_s is not None]),
        "first_audio_from_lookahead_ms": _percentiles(from_lookahead),
        # Which text message completed the lookahead (1: the first), or the `end` after them all;
        # null when the server's tokenizer was not at hand (server_tokenizer).
        "lookahead": None
        if lookahead is None
        else {"tokens": lookahead.tokens, "text_messages": lookahead.messages, "at_end": lookahead.at_end},
        "session_setup_ms": _percentiles([r.setup_s * 1000 for r in runs if r.setup_s is not None]),
        "speed_x_realtime": _percentiles([r.audio_s / r.done_s for r in full if r.done_s], low=True),
        "underruns": {
            "streams_with_underruns": sum(1 for u in underruns if u.count),
            "total": sum(u.count for u in underruns),
            "total_gap_s": round(sum(u.gap_s for u in underruns), 3),
            "start_buffer_ms": START_BUFFER_S * 1000,
            "played_before_gap_s": _percentiles([p for u in underruns for p in u.played_s]),
        },
        "cancel_ms": _percentiles([r.cancel_s * 1000 for r in runs if r.cancel_s is not None]),
        "cancelled_sessions": sum(1 for r in runs if r.probe),
        "aggregate_audio_s_per_s": round(sum(r.audio_s for r in runs) / wall, 3),
        "wall_s": round(wall, 3),
        "session_end_s": _percentiles([end for end in ends if end is not None]),
        # Streams go round-robin: process k ran stream indices k, k + P, ...
        "client_process_end_s": [round(end, 3) for end in last_end],
        "client_processes": processes,
        # A spawned client process's CPU time over the level's wall time: near 1.0, the client (one
        # Python thread) and not the server may be what limits the level. Empty when run in process.
        "client_cpu_share": [round(cpu / wall, 3) for cpu in level.client_cpu_s] if wall > 0 else [],
        "sessions_per_server_process": server_processes or [],
        # CPU cores each process of `voicewire serve` used in the level, by role ("engine": the
        # engine process; "server": the workers), largest first; empty for a server in this process.
        "server_cpu_cores": server_cores or {},
        "engine": engine or {},
        "server": server or {},
    }


async def bench_level(load: Load, streams: int, processes: int = 1) -> dict:
    """One concurrency level, its sessions spread over `processes` client processes; returns its report."""
    # Before the first scrape: loading a real checkpoint's tokenizer takes a second, which would
    # count in the window the server's CPU use is averaged over.
    tokenizer = await asyncio.to_thread(server_tokenizer, load.url)
    lookahead = (
        None
        if tokenizer is None
        else lookahead_send(tokenizer, text_pieces(load.rate), load.lookahead_tokens)
    )
    before = await asyncio.to_thread(_scrape, load.url)
    scraped = time.monotonic()
    level = await run_level(load, streams, processes)
    between_scrapes_s = time.monotonic() - scraped
    after = await asyncio.to_thread(_scrape, load.url)
    # Here, not at the top: voicewire.engine brings torch, which the client processes do not need.
    from voicewire.engine.runtime.metrics import (
        cores_used,
        histogram_report,
        read_histograms,
        read_process_cpu,
    )
    from voicewire.server.metrics import SERVER_HISTOGRAMS

    engine = histogram_report(read_histograms(before), read_histograms(after))
    server = histogram_report(
        read_histograms(before, SERVER_HISTOGRAMS),
        read_histograms(after, SERVER_HISTOGRAMS),
        SERVER_HISTOGRAMS,
    )
    shares = process_shares(sessions_by_process(before), sessions_by_process(after))
    cores = cores_used(read_process_cpu(before), read_process_cpu(after), between_scrapes_s)
    return level_report(streams, load.frames, load.rate, level, engine, shares, server, cores, lookahead)


def bench_service(
    levels: list[int],
    model: BenchModel,
    url: str | None = None,
    frames: int = 50,
    text_rate: float = 8.0,
    sessions_per_stream: int = 1,
    chunks: tuple[int, ...] | None = None,
    cancel_every: int = 4,
    client_processes: int | None = None,
) -> dict:
    """`voicewire bench`: each level in turn against the server at `url`, or (None) one served in
    this process on loopback, with `model`; returns the report. `client_processes` per level
    (None: `default_client_processes`)."""
    server = engine = None
    if url is None:  # serve in this process, on loopback
        import torch

        from voicewire.engine import Engine
        from voicewire.engine.runtime.gc_pauses import freeze_startup_heap
        from voicewire.server.app import BackgroundServer, create_app
        from voicewire.server.config import ServerConfig

        engine = Engine.from_config(model.engine_config(max(levels)))
        server_config = ServerConfig(max_sessions=max(levels) + 8, max_sessions_per_key=max(levels) + 8)
        server = BackgroundServer(create_app(engine, server_config))
        url = f"ws://127.0.0.1:{server.start()}"
        freeze_startup_heap()  # as each process of `voicewire serve` does
    try:
        load = Load(url, frames, text_rate, first_speaker(url), sessions_per_stream, chunks, cancel_every)
        results = []
        for n in levels:
            processes = client_processes or default_client_processes(n)
            results.append(asyncio.run(bench_level(load, n, processes)))
        device = "remote"
        if engine is not None:
            device = str(engine.model.device)
            if engine.model.device.type == "cuda":
                device = f"{device} ({torch.cuda.get_device_name(engine.model.device)})"
        report = {
            "url": url,
            "device": device,
            "model": str(engine.model.folder) if engine is not None else "remote",
            "frames_per_stream": frames,
            "text_rate_words_per_s": text_rate,
            "sessions_per_stream": sessions_per_stream,
            "chunks": list(chunks) if chunks else None,
            "cancel_every": cancel_every,
            "levels": results,
        }
        if engine is not None and engine.model.device.type == "cuda":
            report["peak_gpu_memory_mb"] = round(
                torch.cuda.max_memory_allocated(engine.model.device) / 2**20, 1
            )
    finally:
        if server is not None:
            server.stop()
        if engine is not None:
            engine.close()
    return report


def markdown(report: dict) -> str:
    """The sweep as a Markdown table."""
    lines = [
        f"Device: {report['device']}; model: {report['model']}; text rate: {report['text_rate_words_per_s']} words/s; "
        f"{report['frames_per_stream']} frames per session, {report.get('sessions_per_stream', 1)} session(s) "
        "per stream, back to back; chunks (frames): "
        + (",".join(map(str, report["chunks"])) if report.get("chunks") else "the server's")
        + ".",
        "",
        "First audio is timed from the first text sent, and from the send that completed the engine's "
        "text lookahead (its first tokens, as the checkpoint's tokenizer cuts the text).",
        "",
        "| streams | first audio p50 / p95 / p99 (ms) | from lookahead p50 / p95 / p99 (ms) "
        "| speed × real time p50 / p5 | underruns (streams, gap s) "
        "| cancel p50 (ms) | audio-s/s | sessions ended p50 / max (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level in report["levels"]:
        first, speed, under = level["first_audio_ms"], level["speed_x_realtime"], level["underruns"]
        ended, after = level["session_end_s"], level["first_audio_from_lookahead_ms"]
        lines.append(
            f"| {level['streams']} | {first['p50']} / {first['p95']} / {first['p99']} "
            f"| {after['p50']} / {after['p95']} / {after['p99']} | {speed['p50']} / {speed['p5']} | "
            f"{under['streams_with_underruns']}, {under['total_gap_s']} | {level['cancel_ms']['p50']} | "
            f"{level['aggregate_audio_s_per_s']} | {ended['p50']} / {ended['max']} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict, path: str) -> None:
    """Latency and throughput against concurrency (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    n = [level["streams"] for level in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for q in ("p50", "p95"):
        left.plot(n, [level["first_audio_ms"][q] for level in levels], marker="o", label=f"first audio {q}")
    left.set_xscale("log", base=2)
    left.set_xlabel("concurrent streams")
    left.set_ylabel("ms")
    left.legend()
    right.plot(n, [level["aggregate_audio_s_per_s"] for level in levels], marker="o")
    right.set_xscale("log", base=2)
    right.set_xlabel("concurrent streams")
    right.set_ylabel("audio seconds per second")
    fig.suptitle(f"voicewire on {report['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
