"""The engine in a process of its own, behind the engine contract (engine/api.py).

`EngineProcess.start(config)` spawns a process that loads the checkpoint, runs an `Engine` and
listens on a private Unix socket. The server that started it, and any other server worker that
`EngineProcess.connect`s, holds an `EngineClient` as with the engine in its own process: awaited
voices, and `StreamHandle`s whose requests go over the socket.

Why: the engine's scheduler and decoder threads give up the GIL at every GPU wait and need it back
at once. In one process with a server they queue behind the event loop's socket, msgpack and Opus
work; in their own process nothing else holds their interpreter. And several server processes
can share one engine, so sockets and Opus are no longer held to one interpreter either.

    server event loop -> outbox -> writer thread --requests, batched--> socket
        --> reader thread (one per server) --> Engine, streams
    server reader thread <--events, batched-- socket <-- sender thread (one per server) <-- streams

Both directions are batched. Requests (opens, tokens, cancels, calls) go into an outbox, which a
writer thread sends once per event-loop iteration (or as soon as it has written the last batch), in
order, with each stream's latest acknowledgement beside them: the engine process reads one message
per batch rather than one per request (its reader threads share one GIL with the scheduler). Events
(chunks, results, replies) are batched by whatever piled up while the last batch was being written,
so a decoder round's chunks are one message; each batch carries the engine's count of live
streams, so every server's capacity check sees the whole engine.
Text is tokenized in the server, not in the engine process: each stream's control here holds an
`IncrementalTokenizer` over the engine's own text tokenizer (sent with the greeting) and sends the
committed tokens (`PackedTokens`), a flush or the end with its tail in the same message. Tokenizing
took about 3% of the engine process's GIL at 256 busy streams, where the scheduler and decoder
threads set the pace; the servers have CPU to spare.
Voices are made in a thread of their own in the engine process, so a reference audio's x-vector
holds up no server's stream requests.

This module is the servers' side; engine_host.py is the engine process's, and engine_wire.py the
messages between them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from types import FrameType
from typing import Any

from voicewire.engine.api import generation_options
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineFull, StreamFailed
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime import engine_wire as wire
from voicewire.engine.runtime.handle import StreamHandle, caller_loop
from voicewire.engine.runtime.stream import Mark, StreamResult
from voicewire.engine.runtime.text_stream import IncrementalTokenizer, PackedTokens
from voicewire.engine.runtime.voices import VoiceCache
from voicewire.engine.voice import Voice

log = logging.getLogger(__name__)

START_TIMEOUT_S = 1800.0  # loading, graph capture and (vllm backend) vLLM's own start
CALL_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 60.0
REJOIN_EVERY_S = 0.5  # a worker's tries to join a restarted engine process


class _Outbox:
    """A server's requests to the engine process, written in batches by a thread of its own.

    Callers (the event loop) only append, so a full pipe stalls the writer and never the loop; the
    writer sends whatever piled up since its last write as one message, `(requests, acknowledged)`.
    An event loop wakes the writer once per iteration, from a callback at the start of the next
    one, so that what one iteration puts (a decoder round's acknowledgements, a burst of opens) is
    one message: woken at once, the writer would take the GIL whenever the loop let go of it (at
    each socket send) and write a few requests at a time. Requests keep the order they were put
    in. Acknowledgements are absolute counts (the stream keeps the largest), so each stream's
    latest stands for all of its earlier ones; they travel in a dict beside the requests and are
    applied after them."""

    def __init__(self, conn: Connection, refused: Callable[[object, Exception], None]) -> None:
        self._conn = conn
        self._refused = refused  # told of a request that cannot be pickled, which is dropped
        self._lock = threading.Lock()
        self._requests: list[object] = []
        self._acknowledged: dict[int, int] = {}
        self._pending = threading.Event()
        self._waking: asyncio.AbstractEventLoop | None = None  # the loop whose callback will wake it
        self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="voicewire-engine-writer", daemon=True)

    def start(self) -> _Outbox:
        self._writer.start()
        return self

    def put(self, request: object) -> None:
        with self._lock:
            if self._closed:
                return  # the engine process is gone; its reader failed the streams
            self._requests.append(request)
        self._wake()

    def acknowledge(self, stream_id: int, consumed_samples: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._acknowledged[stream_id] = consumed_samples
        self._wake()

    def _wake(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in a loop: at once
            self._pending.set()
            return
        if self._waking is not loop:
            self._waking = loop
            loop.call_soon(self._wake_now)

    def _wake_now(self) -> None:
        self._waking = None
        self._pending.set()

    def wake_if_stalled(self) -> None:
        """A loop that stopped before its waking callback ran (closed, say) leaves requests
        waiting for the next caller; the reader thread calls this with every batch it reads."""
        loop = self._waking
        if loop is not None and not loop.is_running():
            self._pending.set()

    def close(self) -> None:
        """Write what was put so far, then stop."""
        with self._lock:
            self._closed = True
        self._pending.set()

    def _write_loop(self) -> None:
        closed = False
        while not closed:
            self._pending.wait()
            with self._lock:
                requests, self._requests = self._requests, []
                acknowledged, self._acknowledged = self._acknowledged, {}
                self._pending.clear()
                closed = self._closed
            if not (requests or acknowledged):
                continue
            try:
                self._conn.send_bytes(self._pack(requests, acknowledged))
            except (OSError, ValueError):  # the engine process is gone; the reader fails the streams
                return

    def _pack(self, requests: list[object], acknowledged: dict[int, int]) -> bytes:
        try:
            return wire.pack((requests, acknowledged))
        except Exception:  # one bad request (a call's arguments) must not take the batch with it
            kept = []
            for request in requests:
                try:
                    wire.pack(request)
                except Exception as exc:
                    self._refused(request, exc)
                else:
                    kept.append(request)
            return wire.pack((kept, acknowledged))


class _RemoteControl:
    """A handle's requests, sent to its stream in the engine process; its text tokenized here, as
    `Stream.push_text` would there."""

    def __init__(self, engine: EngineProcess, stream_id: int, tokenizer: TextTokenizer) -> None:
        self._engine = engine
        self._id = stream_id
        self._tokens = IncrementalTokenizer(tokenizer)
        self._pushed = False  # whether the engine has heard of text yet

    def push_text(self, text: str) -> None:
        tokens = self._tokens.push(text)
        # A push that commits no token tells the engine nothing, unless it is the first: the
        # engine times a stream's first audio from its first text.
        if tokens or not self._pushed:
            pushed_at = 0.0 if self._pushed else time.monotonic()
            self._pushed = True
            self._engine._send(wire.Tokens(self._id, PackedTokens.of(tokens), pushed_at=pushed_at))

    def flush(self) -> None:
        self._engine._send(wire.Tokens(self._id, PackedTokens.of(self._tokens.flush()), Mark.FLUSH))

    def end(self) -> None:
        self._engine._send(wire.Tokens(self._id, PackedTokens.of(self._tokens.flush()), Mark.END))

    def cancel(self) -> None:
        self._engine._send(wire.Cancel(self._id))

    def acknowledge(self, consumed_samples: int) -> None:
        self._engine._outbox.acknowledge(self._id, consumed_samples)


def _fail(stream: StreamHandle, error: StreamFailed) -> None:
    result = StreamResult("error", 0, 0, stream.consumed_samples, -1, error)
    try:
        stream.loop.call_soon_threadsafe(stream.finish, result)
    except RuntimeError:  # that loop is closed: nobody is listening any more
        pass


def _deliver_all(items: list[tuple[StreamHandle, object]]) -> None:
    for stream, event in items:
        if isinstance(event, wire.Chunk):
            stream.deliver(event.chunk)
        elif isinstance(event, wire.Finished):
            stream.finish(event.result)


@dataclass
class _Owner:
    """What the server that started the engine process holds besides its connection."""

    config: EngineConfig
    process: multiprocessing.process.BaseProcess
    control: Connection  # closing it (or sending wire.Close) stops the engine process
    folder: str  # holds the socket
    deaths: list[float] = dataclasses.field(default_factory=list)  # time.monotonic() of each


@dataclass(frozen=True)
class RestartPolicy:
    """An engine process that dies is started again, unless it died more than `max_deaths` times
    within `window_s`: then the server gives up (and exits non-zero, for its supervisor)."""

    max_deaths: int = 3
    window_s: float = 300.0


def _engine_main(
    config: EngineConfig, address: str, authkey: bytes, owner: Connection, log_level: int
) -> None:
    """The engine process's entry. engine_host, the engine's side, is imported there and not here:
    it loads PyTorch, which neither the server that spawns it nor its workers need."""
    from voicewire.engine.runtime import engine_host

    engine_host.child_main(config, address, authkey, owner, log_level)


def _spawn(
    config: EngineConfig, address: str, authkey: bytes, timeout_s: float
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    """Start an engine process listening on `address`; returns once its engine is loaded."""
    context = multiprocessing.get_context("spawn")
    control, child_control = context.Pipe()
    level = logging.getLogger().getEffectiveLevel()
    process = context.Process(
        target=_engine_main,
        args=(config, address, authkey, child_control, level),
        name="voicewire-engine",
        daemon=False,  # the vllm backend starts processes of its own
    )
    process.start()
    child_control.close()
    try:
        if not control.poll(timeout_s):
            raise RuntimeError(f"the engine process was not ready after {timeout_s:g} s")
        first = wire.read(control)
    except EOFError:
        process.join(timeout=5)
        raise RuntimeError(
            f"the engine process exited (code {process.exitcode}) before it was ready; see its log"
        ) from None
    except BaseException:
        process.kill()
        raise
    if isinstance(first, wire.StartFailed):
        process.join(timeout=CLOSE_TIMEOUT_S)
        if first.error is not None:
            raise first.error
        raise RuntimeError(f"the engine process failed to start: {first.message}")
    assert isinstance(first, wire.Listening), first
    return process, control


def _greeted(address: str, authkey: bytes) -> tuple[Connection, wire.Ready]:
    """A new connection to the engine process listening on `address`, and its greeting."""
    conn = Client(address, family="AF_UNIX", authkey=authkey)
    try:
        ready = wire.read(conn)
    except BaseException:
        conn.close()
        raise
    assert isinstance(ready, wire.Ready), ready
    return conn, ready


def _owner_alive(parent: int) -> bool:
    """Whether a worker's parent, the process that owns the engine process, is still there. A
    worker that multiprocessing started watches its parent's sentinel: it also tells a parent that
    died before `parent` was read, where the worker's parent pid is already its new reaper's (and
    the worker, its socket listening on the server's port, would wait START_TIMEOUT_S)."""
    process = multiprocessing.parent_process()
    if process is not None:
        return process.is_alive()
    return os.getppid() == parent


def _join(
    address: str, authkey: bytes, parent: int, stopping: Callable[[], bool] = lambda: False
) -> tuple[Connection, wire.Ready]:
    """A worker's connection to the engine process its parent owns, and its greeting. An engine
    process that is not listening, or dies before its greeting is read, is tried again every
    REJOIN_EVERY_S: its owner starts another on the same socket. Raises the last error once
    `stopping()`, once START_TIMEOUT_S has passed, or once the parent is gone (then nobody starts
    another); a wrong key at once, for it never heals."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return _greeted(address, authkey)
        except (OSError, EOFError):  # OSError too for a greeting cut short
            if stopping() or time.monotonic() >= deadline or not _owner_alive(parent):
                raise
        time.sleep(REJOIN_EVERY_S)


@contextlib.contextmanager
def _sigterm_noted() -> Iterator[threading.Event]:
    """An event set when SIGTERM comes, while in this block (main thread only; elsewhere it is never
    set). A server worker joins the engine process while uvicorn loads its app, and uvicorn only
    notes the signal then, to act on it after the load: without this, a worker whose engine process
    is being restarted would wait for it through its server's stop, until killed. The handler it
    replaces still runs."""
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    before = signal.getsignal(signal.SIGTERM)

    def note(signum: int, frame: FrameType | None) -> None:
        if before == signal.SIG_IGN:
            return
        noted.set()
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL:  # as if no handler had been here: end now
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)


class EngineProcess:
    """A connection to an `Engine` running in its own process; see the module's docstring.
    `start` spawns that process and owns it, starting it again when it dies (`RestartPolicy`);
    `connect` joins one (another server worker), and joins it again after such a restart."""

    def __init__(
        self,
        conn: Connection,
        ready: wire.Ready,
        address: str,
        authkey: bytes,
        owner: _Owner | None = None,
        on_lost: Callable[[], None] | None = None,
        restarts: RestartPolicy | None = None,
    ) -> None:
        self.address = address
        self.authkey = authkey
        self._owner = owner
        self._restarts = restarts
        self._ids = itertools.count(1)
        self._streams: dict[int, StreamHandle] = {}
        self._calls: dict[int, concurrent.futures.Future] = {}
        self.voices = VoiceCache()  # made there, kept here: a kept voice costs no call
        self._exited = False  # it went away unasked and is not coming back
        self._on_lost = on_lost
        self._closing = False
        self.restarts = 0  # times this connection was made again to a new engine process
        self._parent = os.getppid()
        self._slot_watchers: list[Callable[[], None]] = []
        self._attach(conn, ready)

    def _attach(self, conn: Connection, ready: wire.Ready, again: bool = False) -> None:
        """Start reading a fresh connection, greeted with `ready`; `again` counts a restart or a
        rejoin, before `healthy` turns true, so a caller who sees it healthy sees the count too."""
        if again:
            self.restarts += 1
        self.info = ready.info
        self.config: EngineConfig = ready.config
        self._tokenizer = ready.tokenizer  # for streams opened from now on
        self._conn = conn
        self._outbox = _Outbox(conn, self._refused).start()
        # The engine's live streams as of its last message, and the streams opened here since.
        self._engine_live = ready.live_streams
        self._opened_since_report = 0
        self._lost: str | None = None  # why the engine is out of reach
        self._reader = threading.Thread(target=self._read_loop, name="voicewire-engine-reader", daemon=True)
        self._reader.start()
        self._slot_freed()  # a new engine process (after a restart) has every slot free

    @classmethod
    def start(
        cls,
        config: EngineConfig,
        timeout_s: float = START_TIMEOUT_S,
        on_lost: Callable[[], None] | None = None,
        restarts: RestartPolicy | None = RestartPolicy(),
    ) -> EngineProcess:
        """Spawn the engine process and wait until its engine is loaded (or failed to load).
        `on_lost` is called (in a reader thread) once the engine process is gone for good: it went
        away unasked and `restarts` (None: never) does not start it again."""
        folder = tempfile.mkdtemp(prefix="voicewire-engine-")  # private (0700): it holds the socket
        address, authkey = os.path.join(folder, "engine.sock"), os.urandom(32)
        try:
            process, control = _spawn(config, address, authkey, timeout_s)
            try:
                conn, ready = _greeted(address, authkey)
            except BaseException:
                process.kill()
                raise
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        owner = _Owner(config, process, control, folder)
        engine = cls(conn, ready, address, authkey, owner, on_lost, restarts)
        log.info("engine process %d ready (%s on %s)", process.pid, engine.info.folder, engine.info.device)
        return engine

    @classmethod
    def connect(
        cls, address: str, authkey: bytes, on_lost: Callable[[], None] | None = None
    ) -> EngineProcess:
        """Join a running engine process (a server worker; the process that started it owns it).
        When it goes away, now or later, this connection waits for its owner to start another and
        joins it: a worker that starts as the engine process dies serves the next one."""
        with _sigterm_noted() as noted:
            try:
                conn, ready = _join(address, authkey, os.getppid(), stopping=noted.is_set)
            except (OSError, EOFError):
                if noted.is_set():
                    raise SystemExit("stopped by SIGTERM while joining the engine process") from None
                raise
        engine = cls(conn, ready, address, authkey, on_lost=on_lost, restarts=RestartPolicy())
        log.info("joined the engine process")
        return engine

    @property
    def live_streams(self) -> int:
        """Streams holding a slot in the whole engine (every server's), as of its last message."""
        return self._engine_live

    @property
    def registry(self) -> None:
        """The engine's metrics live in the engine process (served through the metrics folder)."""
        return None

    @property
    def pid(self) -> int | None:
        """The engine process's id, for the server that started it."""
        return self._owner.process.pid if self._owner is not None else None

    @property
    def exited(self) -> bool:
        """Whether the engine process went away unasked (before any `close`) for good."""
        if self._restarts is None and self._owner is not None and not self._closing:
            return self._exited or not self._owner.process.is_alive()
        return self._exited

    @property
    def healthy(self) -> bool:
        return self._lost is None and (self._owner is None or self._owner.process.is_alive())

    async def voice(self, **fields: Any) -> Voice:
        """As `Engine.voice`, made in the engine process (reference audio is encoded there) and
        kept here by content: a burst of sessions with one voice waits for one call at most."""
        return await self.voices.get(fields, lambda: self._call("voice", **fields))

    async def check_voice(self, voice: Voice) -> None:
        """As `Engine.check_voice`; a voice this side made and kept has been checked already."""
        if not self.voices.holds(voice):
            await self._call("check_voice", voice)

    def open_stream(self, voice: Voice, options: StreamOptions | None = None) -> StreamHandle:
        """As `Engine.open_stream`. Options and the whole engine's capacity are checked here; a voice
        the engine refuses, or a slot taken meanwhile by another server, fails the stream (its
        iteration raises the reason)."""
        if self._lost is not None:
            raise StreamFailed(f"the engine process is gone ({self._lost}); try again shortly")
        loop = caller_loop()
        options = options or StreamOptions()
        generation_options(self.info, options)  # raises InvalidOptions
        live = max(len(self._streams), self._engine_live + self._opened_since_report)
        if live >= self.config.max_streams:
            raise EngineFull(f"all {self.config.max_streams} stream slots are in use")
        stream_id = next(self._ids)
        stream = StreamHandle(stream_id, voice, options, _RemoteControl(self, stream_id, self._tokenizer))
        assert stream.loop is loop
        self._streams[stream_id] = stream
        self._opened_since_report += 1
        self._send(wire.Open(stream_id, voice, options))
        return stream

    def watch_slots(self, callback: Callable[[], None]) -> None:
        """As `Engine.watch_slots`, called in this connection's reader thread: when a stream of
        this server finished, or the engine's count of live streams fell (every server hears it
        when the engine is full no more)."""
        self._slot_watchers.append(callback)

    def _slot_freed(self) -> None:
        for callback in self._slot_watchers:
            callback()

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._lost is not None:
            raise StreamFailed(f"the engine process is gone ({self._lost}); try again shortly")
        future: concurrent.futures.Future = concurrent.futures.Future()
        call_id = next(self._ids)
        self._calls[call_id] = future
        self._send(wire.Call(call_id, method, args, kwargs))
        return await asyncio.wait_for(asyncio.wrap_future(future), CALL_TIMEOUT_S)

    def _send(self, request: object) -> None:
        self._outbox.put(request)

    def _refused(self, request: object, error: Exception) -> None:
        """In the writer thread: `request` could not be pickled and was not sent."""
        if isinstance(request, wire.Call):
            future = self._calls.pop(request.call_id, None)
            if future is not None:
                future.set_exception(error)
            return
        log.error("could not send %s to the engine process: %s", type(request).__name__, error)
        if isinstance(request, wire.Open):
            # open_stream counted it against the engine's slots until the engine's next report,
            # which will not count it: an idle engine may not report for a long while, and this
            # server would see one slot fewer than there are. (The report may also have come
            # between the two, and zeroed the count already.)
            self._opened_since_report = max(0, self._opened_since_report - 1)
        stream = self._streams.pop(getattr(request, "stream_id", -1), None)
        if stream is not None:  # the engine process never heard of it, or not all of it
            _fail(stream, StreamFailed(f"could not send it to the engine process: {error}"))
            self._slot_freed()

    def _read_loop(self) -> None:
        try:
            while True:
                message: wire.Events = wire.read(self._conn)
                received = time.monotonic()
                live = message.live_streams
                freed = live < self._engine_live
                self._engine_live = live
                self._opened_since_report = 0
                by_loop: dict[asyncio.AbstractEventLoop, list[tuple[StreamHandle, object]]] = {}
                for event in message.events:
                    if isinstance(event, wire.Reply):
                        self._reply(event)
                        continue
                    stream = self._streams.get(event.stream_id)
                    if stream is None:
                        continue
                    if isinstance(event, wire.Finished):
                        del self._streams[event.stream_id]
                        freed = True
                    elif isinstance(event, wire.Chunk):  # its way here, for the server's metrics
                        event = wire.Chunk(
                            event.stream_id,
                            dataclasses.replace(event.chunk, sent_at=message.sent_at, received_at=received),
                        )
                    by_loop.setdefault(stream.loop, []).append((stream, event))
                for loop, items in by_loop.items():
                    try:
                        loop.call_soon_threadsafe(_deliver_all, items)
                    except RuntimeError:  # that loop is closed: nobody is listening any more
                        pass
                if freed:  # after the counts above, which open_stream checks
                    self._slot_freed()
                self._outbox.wake_if_stalled()
        except (EOFError, OSError):
            pass
        self._outbox.close()
        self._engine_live = 0
        self._fail_all("the engine was closed" if self._closing else "the engine process exited")
        self._slot_freed()  # waiters for a slot try again and hear that the engine is away
        if self._closing:
            return
        if self._restarts is None:
            self._give_up()
        elif self._owner is not None:
            threading.Thread(target=self._restart, name="voicewire-engine-restart", daemon=True).start()
        else:
            threading.Thread(target=self._rejoin, name="voicewire-engine-rejoin", daemon=True).start()

    def _give_up(self) -> None:
        self._exited = True
        if self._on_lost is not None:
            self._on_lost()

    def _restart(self) -> None:
        """The owner's engine process died: start another on the same socket, unless it died too
        often lately. Its streams have failed already; new ones wait for `healthy`."""
        owner, policy = self._owner, self._restarts
        assert owner is not None and policy is not None
        owner.process.join(timeout=5)
        now = time.monotonic()
        owner.deaths = [t for t in owner.deaths if now - t < policy.window_s] + [now]
        if len(owner.deaths) > policy.max_deaths:
            log.error(
                "the engine process died %d times in %g s (the last with exit code %s): giving up",
                len(owner.deaths),
                policy.window_s,
                owner.process.exitcode,
            )
            self._give_up()
            return
        log.warning("the engine process exited (code %s): starting another", owner.process.exitcode)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.address)  # the dead one's socket file
        try:
            process, control = _spawn(owner.config, self.address, self.authkey, START_TIMEOUT_S)
            conn, ready = _greeted(self.address, self.authkey)
        except Exception:
            log.exception("the engine process could not be started again")
            self._give_up()
            return
        owner.control.close()
        owner.process, owner.control = process, control
        if self._closing:  # closed meanwhile: close() found the old process; stop this one
            with contextlib.suppress(OSError):
                wire.write(control, wire.Close())
            return
        self._attach(conn, ready, again=True)
        log.info("engine process %d ready again", process.pid)

    def _rejoin(self) -> None:
        """A worker's engine process died: join the one its owner starts next (or give up, as
        `_join` does)."""
        try:
            conn, ready = _join(self.address, self.authkey, self._parent, lambda: self._closing)
        except (OSError, EOFError, multiprocessing.AuthenticationError) as exc:
            if not self._closing:
                log.error("could not join the engine process again: %s: %s", type(exc).__name__, exc)
                self._give_up()
            return
        if self._closing:  # closed while joining: nobody reads this connection any more
            conn.close()
            return
        self._attach(conn, ready, again=True)
        log.info("joined the engine process again")

    def _reply(self, reply: wire.Reply) -> None:
        future = self._calls.pop(reply.call_id, None)
        if future is None:
            return
        if reply.error is not None:
            future.set_exception(reply.error)
        else:
            future.set_result(reply.value)

    def _fail_all(self, reason: str) -> None:
        self._lost = reason
        if not self._closing:
            log.error("%s: failing its %d streams", reason, len(self._streams))
        for call_id in list(self._calls):
            future = self._calls.pop(call_id, None)
            if future is not None:
                future.set_exception(StreamFailed(reason))
        for stream_id in list(self._streams):
            stream = self._streams.pop(stream_id, None)
            if stream is not None:
                _fail(stream, StreamFailed(reason))

    def close(self) -> None:
        """Disconnect (the engine process cancels this connection's streams); the owner also stops
        the engine process and waits for it."""
        if self._closing:
            return
        self._closing = True
        owner = self._owner
        if owner is None:
            self._send(wire.Bye())
            self._outbox.close()  # written now: the wait below may be in the loop that would wake it
            self._reader.join(timeout=CLOSE_TIMEOUT_S)  # it sees the engine process hang up
            self._conn.close()
            return
        with contextlib.suppress(OSError):
            wire.write(owner.control, wire.Close())
        owner.process.join(timeout=CLOSE_TIMEOUT_S)
        if owner.process.is_alive():
            log.warning("the engine process did not stop in %g s; killing it", CLOSE_TIMEOUT_S)
            owner.process.kill()
            owner.process.join(timeout=5)
        self._reader.join(timeout=5)  # it sees the connection close with the process
        self._conn.close()
        owner.control.close()
        shutil.rmtree(owner.folder, ignore_errors=True)

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
