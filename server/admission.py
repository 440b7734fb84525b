"""Admission: a context or a speech request that finds every engine stream slot taken waits its
turn for one, a short while (`ServerConfig.slot_wait_s`), before it is refused with engine_full.

The waiters for one engine in one server process stand in one line, first come first served,
which the socket and the HTTP endpoint share. Only the first in line tries for a slot: when the
engine says one may have come free (`EngineClient.watch_slots`), and every RECHECK_S besides. Its
turn over, with a stream or without, the next in line tries at once. A caller finding
`slot_queue` waiters ahead of it is refused at once. Across the workers of `voicewire serve`
there is no common line: each worker's first waiter tries when the engine process says it has
room again, and the worker that asks first gets the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections import deque
from dataclasses import dataclass, field

from voicewire.engine.api import EngineClient
from voicewire.engine.config import StreamOptions
from voicewire.engine.errors import EngineError, EngineFull
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.voice import Voice
from voicewire.server.config import ServerConfig
from voicewire.server.metrics import Metrics

# How often the first in line tries without being told that a slot came free: the engine in this
# process says so a moment before its scheduler counts the slot free, and another worker may
# take a slot of the engine process between its word and our request.
RECHECK_S = 0.05


class _Line:
    """One engine's waiters in this process, in arrival order: each is an event, set when it is
    its turn to try. They wait in one event loop (a server process runs one)."""

    def __init__(self) -> None:
        self.turns: deque[asyncio.Event] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None

    def slot_freed(self) -> None:
        """Called in an engine thread: the first in line should try now."""
        loop = self.loop
        if loop is not None and self.turns:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(self.wake_first)

    def wake_first(self) -> None:
        if self.turns:
            self.turns[0].set()

    def join(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        if self.turns and loop is not self.loop:
            raise RuntimeError("every caller waiting for one engine's slots must run in one event loop")
        self.loop = loop
        turn = asyncio.Event()
        self.turns.append(turn)
        return turn

    def leave(self, turn: asyncio.Event) -> None:
        self.turns.remove(turn)
        self.wake_first()  # a slot may be free (the leaver gave up, or two came free at once)


# One line per engine, for every app and endpoint on it in this process; it goes with the engine.
_LINES: weakref.WeakKeyDictionary[EngineClient, _Line] = weakref.WeakKeyDictionary()


def _line_of(engine: EngineClient) -> _Line:
    line = _LINES.get(engine)
    if line is None:
        line = _LINES[engine] = _Line()
        engine.watch_slots(line.slot_freed)
    return line


@dataclass
class Admission:
    """Opens streams on `engine`, waiting in line for a slot as `config` allows."""

    engine: EngineClient
    config: ServerConfig
    metrics: Metrics
    _line: _Line = field(init=False)

    def __post_init__(self) -> None:
        self._line = _line_of(self.engine)

    @property
    def waiting(self) -> int:
        """Callers in line for this engine's slots, in this process."""
        return len(self._line.turns)

    def open_now(self, voice: Voice, options: StreamOptions) -> StreamHandle | None:
        """A stream at once when a slot is free and nobody here waits for one; None when the
        caller may wait for one (`open_stream`). Raises EngineFull when it may not (waiting is
        off, or the line is full), and whatever else the engine's `open_stream` raises."""
        if not self._line.turns:
            try:
                return self.engine.open_stream(voice, options)
            except EngineFull:
                if not self._may_wait():
                    raise
        self._check_room()
        return None

    async def open_stream(self, voice: Voice, options: StreamOptions) -> StreamHandle:
        """A stream, after waiting in line up to `slot_wait_s` when no slot is free. Raises as
        `open_now`, or EngineFull when no slot came in time. Cancelled, it leaves the line."""
        stream = self.open_now(voice, options)
        if stream is not None:
            return stream
        line = self._line
        turn = line.join()
        self.metrics.slot_queue.inc()
        started = time.monotonic()
        deadline = started + self.config.slot_wait_s
        failure: str | None = None
        try:
            while True:
                turn.clear()  # before trying: a slot freed while we try is not missed
                first = line.turns[0] is turn
                if first:
                    try:
                        return self.engine.open_stream(voice, options)
                    except EngineFull:
                        pass
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    failure = "timeout"
                    raise EngineFull(
                        f"all {self.engine.config.max_streams} stream slots stayed in use for "
                        f"{self.config.slot_wait_s:g} s"
                    )
                # Behind others, a turn is set when the one ahead leaves the line.
                with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError itself from 3.11
                    await asyncio.wait_for(turn.wait(), min(remaining, RECHECK_S) if first else remaining)
        except asyncio.CancelledError:
            failure = "cancelled"
            raise
        except EngineError:
            failure = failure or "error"  # the engine went away, say
            raise
        finally:
            line.leave(turn)
            self.metrics.slot_queue.dec()
            self.metrics.slot_wait.observe(time.monotonic() - started)
            if failure is not None:
                self.metrics.slot_wait_failures.labels(failure).inc()

    def _may_wait(self) -> bool:
        return self.config.slot_wait_s > 0 and self.config.slot_queue > 0

    def _check_room(self) -> None:
        """Raise EngineFull unless the caller may join the line."""
        if not self._may_wait():
            raise EngineFull(f"all {self.engine.config.max_streams} stream slots are in use")
        if len(self._line.turns) >= self.config.slot_queue:
            self.metrics.slot_wait_failures.labels("queue_full").inc()
            raise EngineFull(
                f"all {self.engine.config.max_streams} stream slots are in use and "
                f"{len(self._line.turns)} requests wait for one already"
            )
