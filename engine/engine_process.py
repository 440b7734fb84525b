"""The engine in a process of its own, behind the Engine's API.

`EngineProcess.start(config)` spawns a child that loads the checkpoint and runs an `Engine`. The
parent gets `info`, `config`, `voice`, `check_voice`, `open_stream`, `live_streams`, `healthy` and
`close`, and its `RemoteStream`s behave as the engine's `Stream`s do: text in, `async for` chunks
out, `wait()` for the result.

Why: the engine's scheduler and decoder threads give up the GIL at every GPU wait and need it back
at once. In one process with a server they queue behind the event loop's socket, msgpack and Opus
work; in their own process nothing else holds their interpreter.

    parent event loop --requests--> pipe --> child main thread --> Engine and its streams
    parent reader thread <--events, batched-- pipe <-- child sender thread <-- stream listeners

Requests are sent as they happen. Events (chunks, results, replies) are batched by whatever piled
up while the last batch was being written, so a decoder round of 256 chunks is one pipe message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeAlias

from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.engine import Engine, EngineInfo, generation_options
from voicewire.engine.errors import EngineError, EngineFull, StreamClosed, StreamFailed
from voicewire.engine.prompt import Voice
from voicewire.engine.stream import AudioChunk, Stream, StreamResult

log = logging.getLogger(__name__)

START_TIMEOUT_S = 1800.0  # loading, graph capture and (vllm backend) vLLM's own start
CALL_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 60.0


# --- what crosses the pipe ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Open:
    stream_id: int
    voice: Voice
    options: StreamOptions


@dataclass(frozen=True)
class _Text:
    stream_id: int
    text: str


@dataclass(frozen=True)
class _Mark:
    stream_id: int
    verb: str  # flush, end or cancel


@dataclass(frozen=True)
class _Acknowledge:
    stream_id: int
    consumed_samples: int


@dataclass(frozen=True)
class _Call:
    call_id: int
    method: str  # voice or check_voice
    args: tuple
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class _Close:
    pass


@dataclass(frozen=True)
class _Ready:
    info: EngineInfo


@dataclass(frozen=True)
class _StartFailed:
    message: str


@dataclass(frozen=True)
class _Chunk:
    stream_id: int
    chunk: AudioChunk


@dataclass(frozen=True)
class _Finished:
    stream_id: int
    result: StreamResult


@dataclass(frozen=True)
class _Reply:
    call_id: int
    value: Any
    error: EngineError | None


def _on_cpu(voice: Voice) -> Voice:
    """The voice with its tensors in host memory: a device tensor would make the parent open CUDA."""
    return dataclasses.replace(
        voice,
        xvector=None if voice.xvector is None else voice.xvector.cpu(),
        ref_codes=None if voice.ref_codes is None else voice.ref_codes.cpu(),
    )


# --- the child ---------------------------------------------------------------------------------


class _Forward:
    """One stream's listener in the child: its chunks and result go to the parent under its id."""

    def __init__(self, stream_id: int, post: Callable[[object], None]) -> None:
        self.stream_id = stream_id
        self._post = post

    def chunk(self, stream: Stream, chunk: AudioChunk) -> None:
        self._post(_Chunk(self.stream_id, chunk))

    def finished(self, stream: Stream, result: StreamResult) -> None:
        self._post(_Finished(self.stream_id, result))


class _EngineHost:
    """The child's side: requests from the pipe drive the engine; events go back in batches."""

    def __init__(self, engine: Engine, conn: Connection) -> None:
        self.engine = engine
        self.conn = conn
        self.streams: dict[int, Stream] = {}
        self._outbox: list[object] = []
        self._lock = threading.Lock()
        self._pending = threading.Event()
        self._closing = False
        self._sender = threading.Thread(target=self._send_loop, name="voicewire-engine-sender", daemon=True)

    def post(self, event: object) -> None:
        with self._lock:
            self._outbox.append(event)
        self._pending.set()

    def _send_loop(self) -> None:
        while True:
            self._pending.wait()
            with self._lock:
                batch, self._outbox = self._outbox, []
                self._pending.clear()
            if batch:
                try:
                    self.conn.send(batch)
                except (OSError, EOFError):  # the parent is gone
                    return
            if self._closing:
                return

    def serve(self) -> None:
        self._sender.start()
        try:
            while True:
                try:
                    request = self.conn.recv()
                except (EOFError, OSError):
                    log.warning("the server process went away; stopping the engine")
                    return
                if isinstance(request, _Close):
                    return
                self._handle(request)
        finally:
            self._closing = True
            self._pending.set()
            self._sender.join(timeout=CLOSE_TIMEOUT_S)

    def _handle(self, request: object) -> None:
        if isinstance(request, _Call):
            self.post(self._call(request))
        elif isinstance(request, _Open):
            self._open(request)
        else:
            stream = self.streams.get(request.stream_id)  # type: ignore[attr-defined]
            if stream is None:
                return  # finished here while the parent was still talking to it
            try:
                if isinstance(request, _Text):
                    stream.push_text(request.text)
                elif isinstance(request, _Acknowledge):
                    stream.acknowledge(request.consumed_samples)
                elif request.verb == "flush":  # type: ignore[attr-defined]
                    stream.flush()
                elif request.verb == "end":  # type: ignore[attr-defined]
                    stream.end()
                else:
                    stream.cancel()
            except StreamClosed:
                pass  # the same race; the parent hears of the stream's end from its result

    def _open(self, request: _Open) -> None:
        forward = _Forward(request.stream_id, self._finished_post(request.stream_id))
        try:
            self.streams[request.stream_id] = self.engine.open_stream(request.voice, request.options, forward)
        except Exception as exc:  # refused here: the parent's stream fails with the reason
            error = (
                exc if isinstance(exc, EngineError) else StreamFailed(f"the engine refused the stream: {exc}")
            )
            self.post(_Finished(request.stream_id, StreamResult("error", 0, 0, 0, -1, error)))

    def _finished_post(self, stream_id: int) -> Callable[[object], None]:
        def post(event: object) -> None:
            if isinstance(event, _Finished):
                self.streams.pop(stream_id, None)
            self.post(event)

        return post

    def _call(self, call: _Call) -> _Reply:
        try:
            if call.method == "voice":
                value: Any = _on_cpu(self.engine.voice(*call.args, **call.kwargs))
            elif call.method == "check_voice":
                value = self.engine.check_voice(*call.args, **call.kwargs)
            else:
                raise EngineError(f"no engine call {call.method!r}")
        except EngineError as exc:
            return _Reply(call.call_id, None, exc)
        except Exception as exc:  # anything else is the engine's fault, said in words the parent can read
            log.exception("engine call %s failed", call.method)
            return _Reply(call.call_id, None, EngineError(f"{call.method} failed: {exc}"))
        return _Reply(call.call_id, value, None)


def _child_main(config: EngineConfig, conn: Connection, log_level: int) -> None:
    # Ctrl-C reaches the whole process group: the server shuts down and closes us in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level, format="%(asctime)s %(levelname)s %(name)s (engine process): %(message)s"
    )
    try:
        engine = Engine.from_config(config)
    except BaseException as exc:
        log.exception("the engine did not start")
        conn.send(_StartFailed(f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(_Ready(engine.info))
        _EngineHost(engine, conn).serve()
    finally:
        engine.close()


# --- the parent --------------------------------------------------------------------------------


class _Done:
    """Queue sentinel: no more chunks."""


class RemoteStream:
    """The parent's handle on a stream in the engine process; used like `Stream`, in the event loop
    that opened it."""

    def __init__(self, stream_id: int, voice: Voice, options: StreamOptions, engine: EngineProcess) -> None:
        self.id = stream_id
        self.voice = voice
        self.options = options
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("open_stream must be called inside a running asyncio event loop") from None
        self._engine = engine
        self._chunks: asyncio.Queue[AudioChunk | type[_Done]] = asyncio.Queue()
        self._done = asyncio.Event()
        self._result: StreamResult | None = None
        self._ended = False
        self._cancelled = False
        self.consumed_samples = 0
        self.delivered_samples = 0

    def push_text(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self._check_open()
        self._engine._send(_Text(self.id, text))

    def flush(self) -> None:
        self._check_open()
        self._engine._send(_Mark(self.id, "flush"))

    def end(self) -> None:
        self._check_open()
        self._ended = True
        self._engine._send(_Mark(self.id, "end"))

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        self._chunks.put_nowait(_Done)
        if self._result is None:
            self._engine._send(_Mark(self.id, "cancel"))

    def _check_open(self) -> None:
        if self._cancelled:
            raise StreamClosed(f"stream {self.id} was cancelled")
        if self._ended:
            raise StreamClosed(f"stream {self.id} has ended; open a new stream for more text")
        if self._result is not None:
            raise StreamClosed(f"stream {self.id} is finished ({self._result.reason})")

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> AudioChunk:
        if self._cancelled:
            raise StopAsyncIteration
        item = await self._chunks.get()
        if item is _Done or self._cancelled:
            if self._result is not None and self._result.error is not None:
                raise self._result.error
            raise StopAsyncIteration
        assert isinstance(item, AudioChunk)
        self.consumed_samples += item.pcm.shape[0]
        if self._result is None:  # a stream paused for being too far ahead may go on
            self._engine._send(_Acknowledge(self.id, self.consumed_samples))
        return item

    async def wait(self) -> StreamResult:
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def result(self) -> StreamResult | None:
        return self._result

    @property
    def unread_samples(self) -> int:
        """Audio that arrived from the engine process and was not read yet."""
        return self.delivered_samples - self.consumed_samples

    # --- in the loop, from the reader thread ---

    def _deliver(self, chunk: AudioChunk) -> None:
        if not self._cancelled:
            self.delivered_samples += chunk.pcm.shape[0]
            self._chunks.put_nowait(chunk)

    def _finish(self, result: StreamResult) -> None:
        self._result = result
        self._chunks.put_nowait(_Done)
        self._done.set()


def _deliver_all(items: list[tuple[RemoteStream, object]]) -> None:
    for stream, event in items:
        if isinstance(event, _Chunk):
            stream._deliver(event.chunk)
        elif isinstance(event, _Finished):
            stream._finish(event.result)


class EngineProcess:
    """An `Engine` running in a child process; see the module's docstring."""

    def __init__(
        self,
        process: multiprocessing.process.BaseProcess,
        conn: Connection,
        info: EngineInfo,
        config: EngineConfig,
    ) -> None:
        self.info = info
        self.config = config
        self._process = process
        self._conn = conn
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._streams: dict[int, RemoteStream] = {}
        self._calls: dict[int, concurrent.futures.Future] = {}
        self._lost: str | None = None  # why the child is gone
        self._closing = False
        self._reader = threading.Thread(target=self._read_loop, name="voicewire-engine-reader", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, config: EngineConfig, timeout_s: float = START_TIMEOUT_S) -> EngineProcess:
        """Spawn the engine process and wait until its engine is loaded (or failed to load)."""
        context = multiprocessing.get_context("spawn")
        conn, child_conn = context.Pipe()
        level = logging.getLogger().getEffectiveLevel()
        process = context.Process(
            target=_child_main, args=(config, child_conn, level), name="voicewire-engine", daemon=False
        )
        process.start()
        child_conn.close()
        try:
            if not conn.poll(timeout_s):
                raise RuntimeError(f"the engine process was not ready after {timeout_s:g} s")
            first = conn.recv()
        except EOFError:
            process.join(timeout=5)
            raise RuntimeError(
                f"the engine process exited (code {process.exitcode}) before it was ready; see its log"
            ) from None
        except BaseException:
            process.kill()
            raise
        if isinstance(first, _StartFailed):
            process.join(timeout=CLOSE_TIMEOUT_S)
            raise RuntimeError(f"the engine process failed to start: {first.message}")
        assert isinstance(first, _Ready)
        log.info("engine process %d ready (%s on %s)", process.pid, first.info.folder, first.info.device)
        return cls(process, conn, first.info, config)

    @property
    def live_streams(self) -> int:
        """Streams opened and not yet finished (the child frees a slot no later than this)."""
        return len(self._streams)

    @property
    def healthy(self) -> bool:
        return self._lost is None and self._process.is_alive()

    def voice(self, **fields: Any) -> Voice:
        """As `Engine.voice`, made in the engine process (reference audio is encoded there)."""
        return self._call("voice", **fields)

    def check_voice(self, voice: Voice) -> None:
        self._call("check_voice", voice)

    def open_stream(self, voice: Voice, options: StreamOptions | None = None) -> RemoteStream:
        """As `Engine.open_stream`. Options and capacity are checked here; a voice the engine
        refuses fails the stream (its iteration raises the reason)."""
        if self._lost is not None:
            raise RuntimeError(f"the engine process is gone: {self._lost}")
        options = options or StreamOptions()
        generation_options(self.info, options)  # raises InvalidOptions
        if len(self._streams) >= self.config.max_streams:
            raise EngineFull(f"all {self.config.max_streams} stream slots are in use")
        stream = RemoteStream(next(self._ids), voice, options, self)
        self._streams[stream.id] = stream
        self._send(_Open(stream.id, voice, options))
        return stream

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._lost is not None:
            raise RuntimeError(f"the engine process is gone: {self._lost}")
        future: concurrent.futures.Future = concurrent.futures.Future()
        call_id = next(self._ids)
        self._calls[call_id] = future
        self._send(_Call(call_id, method, args, kwargs))
        return future.result(timeout=CALL_TIMEOUT_S)

    def _send(self, request: object) -> None:
        try:
            with self._send_lock:
                self._conn.send(request)
        except (OSError, ValueError) as exc:  # the child is gone; the reader fails its streams
            if self._lost is None:
                log.error("could not reach the engine process: %s", exc)

    def _read_loop(self) -> None:
        try:
            while True:
                batch = self._conn.recv()
                by_loop: dict[asyncio.AbstractEventLoop, list[tuple[RemoteStream, object]]] = {}
                for event in batch:
                    if isinstance(event, _Reply):
                        self._reply(event)
                        continue
                    stream = self._streams.get(event.stream_id)
                    if stream is None:
                        continue
                    if isinstance(event, _Finished):
                        del self._streams[event.stream_id]
                    by_loop.setdefault(stream.loop, []).append((stream, event))
                for loop, items in by_loop.items():
                    try:
                        loop.call_soon_threadsafe(_deliver_all, items)
                    except RuntimeError:  # that loop is closed: nobody is listening any more
                        pass
        except (EOFError, OSError):
            pass
        self._fail_all("the engine process exited" if not self._closing else "the engine was closed")

    def _reply(self, reply: _Reply) -> None:
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
            log.error(
                "%s (exit code %s): failing its %d streams",
                reason,
                self._process.exitcode,
                len(self._streams),
            )
        for call_id in list(self._calls):
            future = self._calls.pop(call_id, None)
            if future is not None:
                future.set_exception(RuntimeError(reason))
        for stream_id in list(self._streams):
            stream = self._streams.pop(stream_id, None)
            if stream is None:
                continue
            result = StreamResult("error", 0, 0, stream.consumed_samples, -1, StreamFailed(reason))
            try:
                stream.loop.call_soon_threadsafe(stream._finish, result)
            except RuntimeError:
                pass

    def close(self) -> None:
        """Stop the engine process (its streams fail) and wait for it."""
        if self._closing:
            return
        self._closing = True
        self._send(_Close())
        self._process.join(timeout=CLOSE_TIMEOUT_S)
        if self._process.is_alive():
            log.warning("the engine process did not stop in %g s; killing it", CLOSE_TIMEOUT_S)
            self._process.kill()
            self._process.join(timeout=5)
        self._reader.join(timeout=5)  # it sees the pipe close with the process
        self._conn.close()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


AnyEngine: TypeAlias = Engine | EngineProcess  # what the server serves: in this process or its own
