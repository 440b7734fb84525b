"""The engine process's side of `EngineProcess` (engine_process.py): it loads the engine, listens
on the private socket, and serves each connecting server on two threads of its own.

A server's reader thread applies its batched requests to the engine in order; its sender thread
writes the events of its streams (chunks, results, call replies) in batches, with the engine's
count of live streams. Voices are made on a small pool of threads, so a reference audio's x-vector
holds up no server's stream requests. A server that disconnects has its streams cancelled.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from typing import Any

from voicewire.engine.config import EngineConfig
from voicewire.engine.errors import EngineError, StreamClosed, StreamFailed
from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.runtime import engine_wire as wire
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.gc_pauses import settle_engine_collector
from voicewire.engine.runtime.metrics import ProcessUsage
from voicewire.engine.runtime.stream import AudioChunk, Stream, StreamResult

log = logging.getLogger(__name__)

VOICE_THREADS = 2  # voices made at once in the engine process (x-vectors, reference codes)
# A checkpoint that is not there, a bad setting: raised again in the server, as in one process.
SETTINGS_ERRORS = (CheckpointError, ValueError, FileNotFoundError)


class _Forward:
    """One stream's listener in the child: its chunks and result go to the parent under its id."""

    def __init__(self, stream_id: int, post: Callable[[wire.Event], None]) -> None:
        self.stream_id = stream_id
        self._post = post

    def chunk(self, stream: Stream, chunk: AudioChunk) -> None:
        self._post(wire.Chunk(self.stream_id, chunk))

    def finished(self, stream: Stream, result: StreamResult) -> None:
        self._post(wire.Finished(self.stream_id, result))


@dataclass
class _Roster:
    """The connected servers, and whether they were last told the engine is full."""

    clients: list[_Client] = dataclasses.field(default_factory=list)
    full: bool = False


class _Client:
    """One connected server process, in the child: its requests drive the engine; its streams'
    events go back to it in batches. When it disconnects, its streams are cancelled."""

    def __init__(
        self,
        engine: Engine,
        conn: Connection,
        name: str,
        voices: concurrent.futures.Executor,
        roster: _Roster,
    ) -> None:
        self.engine = engine
        self.conn = conn
        self.name = name
        self.streams: dict[int, Stream] = {}
        self._voices = voices
        self._roster = roster
        self._sent_live = -1  # the live-stream count this server was last told
        self._outbox: list[wire.Event] = []
        self._lock = threading.Lock()
        self._pending = threading.Event()
        self._gone = False
        roster.clients.append(self)
        threading.Thread(target=self._send_loop, name=f"voicewire-send_{name}", daemon=True).start()
        threading.Thread(target=self._read_loop, name=f"voicewire-read_{name}", daemon=True).start()

    def post(self, event: wire.Event) -> None:
        with self._lock:
            self._outbox.append(event)
        self._pending.set()

    def _recount(self) -> None:
        """A stream opened or finished. Each server hears the engine's count of live streams with
        every batch of its own; when the engine becomes full, or is full no more, every server
        hears it at once, so that each refuses what the engine has no slot for (and only that).
        Telling every server of every open would wake each one's sender as a stream starts."""
        full = self.engine.live_streams >= self.engine.config.max_streams
        if full != self._roster.full:
            self._roster.full = full
            for client in list(self._roster.clients):
                client._pending.set()

    def _send_loop(self) -> None:
        while not self._gone:
            self._pending.wait()
            with self._lock:
                batch, self._outbox = self._outbox, []
                self._pending.clear()
            # Counted after the batch's results were posted: a finished stream's slot is free by
            # then (the scheduler frees it before the decoder finishes the stream).
            live = self.engine.live_streams
            if batch or live != self._sent_live:
                try:
                    wire.write(self.conn, wire.Events(live, batch, time.monotonic()))
                except (OSError, EOFError, ValueError):  # it went away; the reader cleans up
                    return
                self._sent_live = live

    def _read_loop(self) -> None:
        while True:
            try:
                requests, acknowledged = wire.read(self.conn)
            except (EOFError, OSError):  # EOF mid-message too: the server died while writing
                break
            if not self._handle_batch(requests, acknowledged):
                break
        self._gone = True
        self._pending.set()
        self._roster.clients.remove(self)
        for stream in list(self.streams.values()):
            stream.cancel()
        if self.streams:
            log.info("%s disconnected: cancelled its %d streams", self.name, len(self.streams))
        self.conn.close()

    def _handle_batch(self, requests: list[object], acknowledged: dict[int, int]) -> bool:
        """One batch from the server (`engine_process._Outbox`): its requests in order, then each stream's latest
        count of samples consumed. False at a `wire.Bye`."""
        for request in requests:
            if isinstance(request, wire.Bye):
                return False
            try:
                self._handle(request)
            except Exception:  # a bug here must not take the other clients' streams down
                log.exception("engine process: request %s from %s failed", type(request).__name__, self.name)
        for stream_id, consumed_samples in acknowledged.items():
            stream = self.streams.get(stream_id)
            if stream is not None:  # else finished here while the server was still reading it
                stream.acknowledge(consumed_samples)
        return True

    def _handle(self, request: object) -> None:
        if isinstance(request, wire.Call):
            # Off this thread: an x-vector takes a while, and this thread carries every request
            # of this server's streams.
            self._voices.submit(lambda: self.post(self._call(request)))
        elif isinstance(request, wire.Open):
            self._open(request)
        elif isinstance(request, wire.Tokens | wire.Cancel):
            stream = self.streams.get(request.stream_id)
            if stream is None:
                return  # finished here while the server was still talking to it
            try:
                if isinstance(request, wire.Tokens):
                    stream.push_tokens(request.tokens.unpack(), request.mark)
                    if request.pushed_at and stream.first_text_at is not None:
                        self.engine.metrics.first_text_hop.observe(stream.first_text_at - request.pushed_at)
                else:
                    stream.cancel()
            except StreamClosed:
                pass  # the same race; the server hears of the stream's end from its result
        else:
            raise TypeError(f"not a request: {request!r}")

    def _open(self, request: wire.Open) -> None:
        forward = _Forward(request.stream_id, self._post_and_forget(request.stream_id))
        try:
            self.streams[request.stream_id] = self.engine.admit(request.voice, request.options, forward)
            self._recount()
        except Exception as exc:  # refused here: the server's stream fails with the reason
            error = (
                exc if isinstance(exc, EngineError) else StreamFailed(f"the engine refused the stream: {exc}")
            )
            self.post(wire.Finished(request.stream_id, StreamResult("error", 0, 0, 0, -1, error)))

    def _post_and_forget(self, stream_id: int) -> Callable[[wire.Event], None]:
        def post(event: wire.Event) -> None:
            self.post(event)
            if isinstance(event, wire.Finished):
                self.streams.pop(stream_id, None)
                self._recount()

        return post

    def _call(self, call: wire.Call) -> wire.Reply:
        try:
            if call.method == "voice":
                value: Any = self.engine.make_voice(call.kwargs)
            elif call.method == "check_voice":
                self.engine.validate_voice(*call.args)
                value = None
            else:
                raise EngineError(f"no engine call {call.method!r}")
        except EngineError as exc:
            return wire.Reply(call.call_id, None, exc)
        except Exception as exc:  # anything else is the engine's fault, said in words the server can read
            log.exception("engine call %s failed", call.method)
            return wire.Reply(call.call_id, None, EngineError(f"{call.method} failed: {exc}"))
        return wire.Reply(call.call_id, value, None)


def _accept_loop(listener: Listener, engine: Engine, config: EngineConfig) -> None:
    voices = concurrent.futures.ThreadPoolExecutor(VOICE_THREADS, thread_name_prefix="voicewire-voice")
    roster = _Roster()
    for number in itertools.count(1):
        try:
            conn = listener.accept()
        except (OSError, EOFError):
            return  # closed: shutting down
        except multiprocessing.AuthenticationError:
            log.warning("engine process: refused a connection with the wrong key")
            continue
        try:
            wire.write(conn, wire.Ready(engine.info, config, engine.model.tokenizer, engine.live_streams))
        except (OSError, EOFError):
            continue
        _Client(engine, conn, f"server-{number}", voices, roster)


def child_main(config: EngineConfig, address: str, authkey: bytes, owner: Connection, log_level: int) -> None:
    # Ctrl-C, and a service manager's SIGTERM, reach the whole process group: the server finishes
    # its sessions and then closes us (or we see its end of the control pipe close if it died).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level, format="%(asctime)s %(levelname)s %(name)s (engine process): %(message)s"
    )
    try:
        engine = Engine.from_config(config)
        settle_engine_collector()
        listener = Listener(address, family="AF_UNIX", authkey=authkey)
    except SETTINGS_ERRORS as exc:  # the server says it in one line
        wire.write(owner, wire.StartFailed(f"{type(exc).__name__}: {exc}", exc))
        return
    except BaseException as exc:
        log.exception("the engine did not start")
        wire.write(owner, wire.StartFailed(f"{type(exc).__name__}: {exc}"))
        return
    cpu = ProcessUsage("engine", engine.metrics.registry).start()
    try:
        threading.Thread(
            target=_accept_loop, args=(listener, engine, config), name="voicewire-accept", daemon=True
        ).start()
        wire.write(owner, wire.Listening())
        with contextlib.suppress(EOFError, OSError):
            wire.read(owner)  # wire.Close, or EOF when the owner died without one
    finally:
        listener.close()
        engine.close()
        cpu.stop()
