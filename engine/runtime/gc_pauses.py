"""CPython's garbage collector in the engine's process: its start-up heap out of the way, and every
collection timed.

While the cyclic collector runs, every thread of the process waits: no step is launched, no chunk
decoded, no event sent. A collection of the oldest generation walks every tracked object, and
after start-up the engine's process holds hundreds of thousands of them (torch and its compiler,
the compiled kernels, the captured graphs), none of which ever becomes garbage. On the lent H100
host single allocations in the engine's threads held the interpreter for 0.7-0.8 s, in the middle
of 256 streams (py-spy, docs/log/2026-11.md, "Garbage-collector pauses").
`freeze_startup_heap` moves that heap out of the collector's sight once the engine is up, so later
collections only walk what was made since; `GcPauses` times every collection into the engine's
metrics, where a regression shows. The server's processes freeze theirs too: they import torch
with the engine's client, and a full collection there stalls every socket of the process.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections import deque

from prometheus_client import Histogram

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5


def freeze_startup_heap() -> tuple[int, float]:
    """Collect what start-up left behind, then freeze the rest (gc.freeze): the collector no longer
    walks it. For a process's entry point once it is ready, not for a library: it is process-wide.
    Returns the number of objects frozen and the seconds that full collection took, i.e. what each
    one would have cost from then on."""
    started = time.perf_counter()
    gc.collect()
    seconds = time.perf_counter() - started
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info(
        "froze %d start-up objects out of the garbage collector's walks (%.0f ms each)", frozen, seconds * 1e3
    )
    return frozen, seconds


# The youngest generation's threshold in the engine's process: a young collection every 20,000
# net allocations instead of Python's 700, and one of the middle generation every 50 of those.
# At 256 busy streams on the lent H200 the engine ran ~1,000 young collections in a 15 s run,
# 0.8-0.9 s with the interpreter held; with these, 4 collections and 0.07 s, and 1,378 audio-s/s
# against 1,320 (bench-engine, with full collections off in that arm, where these keep Python's
# threshold for them; docs/log/2026-11.md, session 63). Most of the engine's objects
# live a few ms (a frame's bookkeeping): a collection every 20,000 finds most of them freed
# already, where one every 700 walked, and promoted, many still alive.
ENGINE_THRESHOLDS = (20_000, 50)


def space_young_collections(thresholds: tuple[int, int] = ENGINE_THRESHOLDS) -> None:
    """Collect the young generations less often (`ENGINE_THRESHOLDS`), keeping Python's threshold
    for full collections. For the engine process's entry point, after `freeze_startup_heap`:
    process-wide, like it."""
    gc.set_threshold(*thresholds, gc.get_threshold()[2])


def settle_engine_collector() -> None:
    """The engine process's collector once the engine is up: its start-up heap frozen
    (`freeze_startup_heap`) and its young generations spaced (`space_young_collections`). Called
    by `serve`'s engine process and by `bench-engine`, so that the bench runs as it does."""
    freeze_startup_heap()
    space_young_collections()


class GcPauses:
    """Times each collection (gc.callbacks) into `every`, and those of the oldest generation also
    into `full`.

    The callback only notes the pause; a thread of its own puts the notes into the histograms. A
    collection can start inside prometheus-client's code, whose locks are not reentrant, so
    observing from the callback could deadlock."""

    def __init__(self, every: Histogram, full: Histogram) -> None:
        self.every = every
        self.full = full
        self._notes: deque[tuple[int, float]] = deque(maxlen=100_000)
        self._started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voicewire-gc-metrics", daemon=True)

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.flush()

    def flush(self) -> None:
        """Observe the pauses noted so far. Safe beside the thread's own flushes: each note is
        taken once (a deque's popleft is atomic; a check before it would race)."""
        while True:
            try:
                generation, seconds = self._notes.popleft()
            except IndexError:
                return
            self.every.observe(seconds)
            if generation == 2:
                self.full.observe(seconds)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # The collection holds the GIL from start to stop: no other thread's pause interleaves.
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._notes.append((info["generation"], time.perf_counter() - self._started))

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()
