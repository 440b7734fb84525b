"""One concurrency level's sessions (`run_level`), and what they measured (`LevelRuns`).

One Python process can only send and receive so much: at 256 streams the client alone makes ~5000 text
sends a second. A level can therefore spread its sessions over several client processes (spawned), which
all start at one agreed wall-clock moment so the sessions overlap as they would in one process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from voicewire.bench.load import Load
from voicewire.bench.session import SessionRun, run_sessions

log = logging.getLogger(__name__)

STREAMS_PER_CLIENT_PROCESS = 64  # the automatic choice: one client process per this many streams...
CPUS_PER_CLIENT_PROCESS = 4  # ...and at most one per this many CPUs, leaving the rest to a local server
CLIENT_START_TIMEOUT_S = 120.0  # spawn + imports, on a loaded machine
CLIENT_START_MARGIN_S = 0.2  # from the parent's "go" to the common start: covers sending it to every worker


@dataclass
class LevelRuns:
    """What a level's sessions measured: one run per session, by stream index, then in order."""

    runs: list[SessionRun]
    wall_s: float  # from the common start to the last session's end
    client_processes: int
    started_at: float  # time.time() at the common start
    client_cpu_s: list[float] = field(default_factory=list)  # each spawned client process's CPU time


def default_client_processes(streams: int) -> int:
    """One client process per 64 streams, but no more than a quarter of the CPUs: 1 for small levels."""
    by_cpus = max(1, (os.cpu_count() or 1) // CPUS_PER_CLIENT_PROCESS)
    return min(by_cpus, math.ceil(streams / STREAMS_PER_CLIENT_PROCESS))


def _client_process(pipe: Connection, load: Load, indices: list[int], streams: int) -> None:
    """A spawned client: says it is ready, waits for the common start time, runs its sessions and
    sends back ("done", (runs, end time, CPU seconds)) or ("error", traceback)."""
    try:
        pipe.send(("ready", None))
        start_at = pipe.recv()
        time.sleep(max(0.0, start_at - time.time()))
        cpu = time.process_time()
        runs = asyncio.run(run_sessions(load, indices, streams))
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
                args=(child, load, share, streams),
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
            worker_process.join()
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
        runs = await run_sessions(load, list(range(streams)))
        return LevelRuns(runs, time.perf_counter() - began, 1, started_at)
    log.info("%d streams over %d client processes", streams, processes)
    return await asyncio.to_thread(_run_in_processes, load, streams, processes)
