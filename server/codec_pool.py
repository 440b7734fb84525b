"""The codec threads of a server process, most urgent job first.

A worker's sessions encode their engine chunks here (Opus, resampling, the tempo stretch: CPU work
that releases the GIL). The engine's decoder delivers its chunks in rounds, a round's for every
stream at once, so a worker's threads take dozens of chunks together. In the order they came, a
context's first chunk (one frame, whose listener waits for it) queued behind chunks of streams with
seconds of audio in hand: at 256 busy streams on an H200 a chunk waited 36-41 ms p50 and
175-182 ms p95 to be encoded (docs/log/2026-11.md, session 53). So each job carries a deadline,
when its listener would next wait for audio, and the threads take the earliest first.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

# A job queued: (deadline, sequence, when it was queued, its future, the work); sequence keeps
# equal deadlines in the order they came and is never equal, so the heap never compares futures.
_Job = tuple[float, int, float, "Future[Any] | None", "Callable[[], Any] | None"]


@dataclass(frozen=True)
class JobTimes:
    """How one job went (seconds): `late`, how long after it was due it started (from when it was
    queued, if it was due before that; 0 if it started early), which the pool's load sets; `run`,
    its wall time; `stalled`, the part of `run` its thread did not run on a CPU: waits for the GIL
    (behind the worker's event loop) and for a CPU."""

    late: float
    run: float
    stalled: float


class CodecPool(Executor):
    """`threads` threads named `{name}_{i}` (metrics.thread_group counts their CPU under `name`'s
    group) that run the queued job with the earliest deadline (`time.monotonic()` seconds).
    `submit`, as an `Executor` (and `loop.run_in_executor`), queues a job due now. With `nice`
    above 0 (Linux), the threads run that much nicer than the process (ServerConfig.codec_nice).
    `on_job`, if given, hears each job's `JobTimes` from the thread that ran it."""

    def __init__(
        self,
        threads: int,
        name: str = "voicewire-codec",
        nice: int = 0,
        on_job: Callable[[JobTimes], None] | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError(f"a codec pool needs a thread; got {threads}")
        if not 0 <= nice <= 19:
            raise ValueError(f"a codec pool's nice is 0-19; got {nice}")
        self._nice = nice
        self._on_job = on_job
        self._queue: list[_Job] = []
        self._ready = threading.Condition()
        self._order = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit_due(self, deadline: float, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        """Queue `fn(*args)` to run once no job due earlier waits."""
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the codec pool is shut down")
            job = (deadline, next(self._order), time.monotonic(), future, functools.partial(fn, *args))
            heapq.heappush(self._queue, job)
            self._ready.notify()
        return future

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_due(time.monotonic(), functools.partial(fn, *args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more jobs; those queued still run, unless `cancel_futures`. With `wait`, returns once
        every thread has finished."""
        with self._ready:
            if not self._closed:
                self._closed = True
                if cancel_futures:
                    for _, _, _, future, _ in self._queue:
                        if future is not None:
                            future.cancel()
                    self._queue.clear()
                # One stop for each thread, due after every job.
                for _ in self._threads:
                    heapq.heappush(self._queue, (float("inf"), next(self._order), 0.0, None, None))
                self._ready.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        if self._nice:
            self._renice()
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                deadline, _, queued, future, work = heapq.heappop(self._queue)
            if future is None or work is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            started, cpu = time.monotonic(), time.thread_time()
            error: BaseException | None = None
            try:
                result = work()
            except BaseException as exc:  # the caller's to handle, as concurrent.futures does
                error = exc
            run, used = time.monotonic() - started, time.thread_time() - cpu
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
            if self._on_job is not None:
                late = max(0.0, started - max(queued, deadline))
                self._on_job(JobTimes(late, run, max(0.0, run - used)))

    def _renice(self) -> None:
        """This thread `nice` steps below the process. Linux keeps a niceness per thread (its
        native id); elsewhere PRIO_PROCESS would renice the whole process, so the threads stay."""
        if not sys.platform.startswith("linux"):
            log.warning("codec threads keep their priority: per-thread nice is Linux's")
            return
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self._nice)
        except OSError as exc:
            log.warning("codec thread %s keeps its priority: %s", threading.current_thread().name, exc)
