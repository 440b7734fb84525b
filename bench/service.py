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
  then weigh 1/K as much in the aggregate, as under a server's steady traffic. In a closed loop a
  server that ends sessions later is offered less work, so audio-s/s also measures how soon `done`
  comes; with `session_interval_s` each stream starts a session every that many seconds instead
  (an open loop, as callers arrive), and `sessions_late` counts those that waited for their
  stream's one before;
- and from the server's `/metrics` before and after the level, the engine's view of the same
  sessions (`engine`): first frame, first chunk, step and decoder-call times, and batch sizes; the
  server's way from the engine to the socket (`server`: each chunk's delivery time, and the gaps a
  listener at the socket would hear); and how many of them each server process (worker) took.

The parts, in the order the data flows: `load` (what every session does and sends), `session` (one
session's client and what it measured), `level` (a level's sessions, spread over client processes at
high stream counts), `lookahead` and `server_http` (what the bench reads from the server: its
tokenizer, its speakers, its /metrics before and after a level), and `report` (the statistics, as
JSON, Markdown and a plot). This module runs them, level by level.
"""

from __future__ import annotations

import asyncio
import time

from voicewire.bench.level import default_client_processes, run_level
from voicewire.bench.load import Load, text_pieces
from voicewire.bench.lookahead import lookahead_send, server_tokenizer
from voicewire.bench.model import BenchModel
from voicewire.bench.report import level_report
from voicewire.bench.server_http import first_speaker, process_shares, scrape, sessions_by_process
from voicewire.engine.runtime.metrics import (
    cores_used,
    histogram_report,
    read_histograms,
    read_process_cpu,
    read_thread_cpu,
    thread_cores_used,
)
from voicewire.server.metrics import SERVER_HISTOGRAMS
from voicewire.server.protocol import FormatSpec


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
    before = await asyncio.to_thread(scrape, load.url)
    scraped = time.monotonic()
    level = await run_level(load, streams, processes)
    between_scrapes_s = time.monotonic() - scraped
    after = await asyncio.to_thread(scrape, load.url)
    engine = histogram_report(read_histograms(before), read_histograms(after))
    server = histogram_report(
        read_histograms(before, SERVER_HISTOGRAMS),
        read_histograms(after, SERVER_HISTOGRAMS),
        SERVER_HISTOGRAMS,
    )
    shares = process_shares(sessions_by_process(before), sessions_by_process(after))
    cores = cores_used(read_process_cpu(before), read_process_cpu(after), between_scrapes_s)
    threads = thread_cores_used(read_thread_cpu(before), read_thread_cpu(after), between_scrapes_s)
    return level_report(
        streams, load.frames, load.rate, level, engine, shares, server, cores, lookahead, threads
    )


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
    session_interval_s: float = 0.0,
    opus_complexity: int = FormatSpec().complexity,
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
        load = Load(
            url,
            frames,
            text_rate,
            first_speaker(url),
            sessions_per_stream,
            chunks,
            cancel_every,
            session_interval_s=session_interval_s,
            opus_complexity=opus_complexity,
        )
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
            "session_interval_s": session_interval_s,
            "chunks": list(chunks) if chunks else None,
            "opus_complexity": opus_complexity,
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
