"""One WebSocket connection: a small state machine, a receive loop, a pump per context and a send
loop, joined by one bounded queue.

receive loop -> (start, text, flush, end, cancel) -> engine streams
context pump -> engine chunks -> encoder (thread pool) -> send queue -> send loop -> socket

A context that finds every engine slot taken waits in its pump for one (server/admission.py);
meanwhile its text, flush and end are held for its stream, and the socket goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from starlette.websockets import WebSocket, WebSocketDisconnect

from voicewire.engine import EngineError
from voicewire.engine.api import EngineClient
from voicewire.engine.errors import StreamClosed
from voicewire.engine.model.text_tokenizer import TextTokenizer, cached_tokenizer
from voicewire.engine.runtime.handle import StreamHandle, check_text
from voicewire.engine.runtime.playback import SimulatedPlayer
from voicewire.engine.runtime.stream import SAMPLE_RATE, SAMPLES_PER_FRAME, AudioChunk
from voicewire.server import protocol as p
from voicewire.server.admission import Admission
from voicewire.server.auth import ANONYMOUS_CALLER, Caller
from voicewire.server.codec_pool import CodecPool
from voicewire.server.config import ServerConfig
from voicewire.server.encoder import AudioEncoder, Packet
from voicewire.server.errors import ProtocolError, from_engine
from voicewire.server.metrics import Metrics
from voicewire.server.settings import SessionSettings, settings_from_start
from voicewire.server.tempo import Tempo
from voicewire.server.voices_api import VoiceLibrary
from voicewire.server.wire import FRAMES, REFUSED, UNPACED, Dialect
from voicewire.server.word_timing import Word, WordTimer, frame_pieces

log = logging.getLogger(__name__)

# Finished contexts a socket remembers (for context_closed, late playback reports, cancel's
# answer). A voice agent keeps one socket for a whole call, a context per turn: kept forever,
# each turn's encoder, resampler and stream would stay for the call's life.
KEEP_FINISHED = 64
# The most messages the send loop writes in one send (server.wire.FRAMES): about a second of one
# context's audio packets, so the messages behind them wait for no more than one such write.
SEND_BATCH = 64


class _FinishedIsClosed:
    """The engine can finish a stream (max_frames, an error) before its `done` is out: text, flush
    or end that arrive in between get `context_closed`, as after `end`, not a failed session.
    A class, not @contextmanager, which would write __traceback__ on our frozen ProtocolError."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, StreamClosed):
            raise ProtocolError(
                "context_closed", f"context {self.context_id!r} has finished: {exc}", self.context_id
            ) from None


class SessionState(enum.Enum):
    CONNECTED = "connected"  # waiting for start
    STARTED = "started"
    CLOSED = "closed"


class ContextState(enum.Enum):
    OPEN = "open"  # takes text
    ENDED = "ended"  # end received; audio still coming
    CANCELLED = "cancelled"
    FINISHED = "finished"  # done or failed


@dataclass
class Context:
    id: str
    stream: StreamHandle | None  # None while it waits for an engine slot
    encoder: AudioEncoder
    state: ContextState = ContextState.OPEN
    chars: int = 0
    seq: int = 0
    pump: asyncio.Task | None = None
    opened_at: float = field(default_factory=time.perf_counter)
    underruns: int = 0  # as last reported by the client
    counted: bool = False  # in the contexts gauge (from its stream's opening until it finishes)
    player: SimulatedPlayer = field(default_factory=SimulatedPlayer)  # the listener's clock at the socket
    # The same clock where its audio is queued for the socket, after IPC and Opus: a gap at the
    # socket and not here was made by the send loop.
    queued: SimulatedPlayer = field(default_factory=SimulatedPlayer)
    held: list[Callable[[StreamHandle], None]] = field(default_factory=list)  # requests while waiting
    words: WordTimer | None = None  # word timing, when the session asked for it
    played: int | None = None  # the last played_samples the client reported
    done: bool = False  # `done` was sent: all its audio is out, maybe still playing at the client
    # Its speaking rate (text.speed): none at 1, so its audio is the engine's untouched. Every count
    # the client sees is of output samples, on the stretched timeline.
    tempo: Tempo | None = None

    @property
    def speed(self) -> float:
        return 1.0 if self.tempo is None else self.tempo.speed

    def output_samples(self, samples: int) -> int:
        """A position in the engine's 24 kHz audio, in output samples: stretched, then resampled."""
        if self.tempo is not None:
            samples = self.tempo.position(samples)
        return samples * self.encoder.format.sample_rate // SAMPLE_RATE

    def due(self, chunk: AudioChunk, now: float, horizon_s: float) -> float:
        """When the codec threads should have `chunk` encoded (server.codec_pool): when its
        listener would next wait for audio, no later than `horizon_s` from now (ServerConfig.
        codec_horizon_s); now for a stream's last chunk, as its client waits for the `done` behind it."""
        if chunk.final:
            return now
        return min(self.player.dry_at(now), now + horizon_s)

    def lead_samples(self, chunk: AudioChunk) -> int:
        """Engine samples of `chunk` that make its context's first Opus packet, to be encoded and
        sent ahead of the rest (`Session._pump`): for the first chunk of an Opus context, not its
        last, unstretched, with more than a packet's samples; else 0."""
        lead = self.encoder.packet_samples_in
        if self.seq or not lead or self.tempo is not None or chunk.final or chunk.pcm.shape[0] <= lead:
            return 0
        return lead

    def render(self, chunk: AudioChunk) -> list[Packet]:
        """An engine chunk as packets (in the executor: the stretch and the codec are CPU work)."""
        pcm = chunk.pcm
        if self.tempo is not None:
            pcm = self.tempo.process(pcm, chunk.final, boundary=chunk.flushed)
        return self.encoder.encode(pcm, chunk.final)

    def push_text(self, text: str) -> None:
        if self.stream is None:
            check_text(text)  # refused now, as the stream would refuse it
            self.held.append(lambda stream: stream.push_text(text))
        else:
            self.stream.push_text(text)

    def flush(self) -> None:
        if self.stream is None:
            self.held.append(StreamHandle.flush)
        else:
            self.stream.flush()

    def end(self) -> None:
        if self.stream is None:
            self.held.append(StreamHandle.end)
        else:
            self.stream.end()

    def opened(self, stream: StreamHandle) -> None:
        """Its slot came: the requests held meanwhile go to the stream, in order."""
        self.stream = stream
        for request in self.held:
            request(stream)
        self.held.clear()


class _SlowConsumer(Exception):
    pass


@dataclass
class Session:
    websocket: WebSocket
    engine: EngineClient
    dialect: Dialect
    config: ServerConfig
    executor: CodecPool  # the process's codec threads, shared by its sessions
    metrics: Metrics
    library: VoiceLibrary | None = None  # for start.voice.id, as `caller` sees it
    caller: Caller = ANONYMOUS_CALLER
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: SessionState = SessionState.CONNECTED
    contexts: dict[str, Context] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Bounded twice: by messages, and by seconds of audio not yet written to the socket.
        self._outbox: asyncio.Queue[p.ServerMessage | None] = asyncio.Queue(maxsize=self.config.send_queue)
        self._queued_audio_s = 0.0
        self._settings: SessionSettings | None = None
        self._fatal: ProtocolError | None = None
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._admission = Admission(self.engine, self.config, self.metrics)
        self._tokens: TextTokenizer | None = None  # word timing on
        self._close_code = 1000  # a close the dialect asked for

    def _fail(self, error: ProtocolError) -> None:
        """A fatal error: the session stops, says why, and closes."""
        if self._fatal is None:
            log.info("session %s: %s", self.id, error)
            self._fatal = error
            self.metrics.errors.labels(error.code).inc()
        self._stop.set()

    async def run(self) -> None:
        """Serve the socket until the client leaves or a fatal error; then release everything."""
        self.metrics.sessions.inc()
        sender = asyncio.create_task(self._send_loop())
        receiver = asyncio.create_task(self._receive_loop())
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({receiver, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if receiver.done() and not receiver.cancelled():
                error = receiver.exception()
                if error is not None and not isinstance(error, WebSocketDisconnect | _SlowConsumer):
                    log.error("session %s failed", self.id, exc_info=error)
                    self._fail(ProtocolError("internal_error", "the server failed; see its log"))
        finally:
            receiver.cancel()
            stopped.cancel()
            await self._shutdown(sender)
            self.metrics.sessions.dec()

    # --- receiving -----------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        try:
            for message in self.dialect.opening():
                await self._handle(message)
        except ProtocolError as error:
            self._error(error)
        while self._fatal is None:
            try:
                frame = await asyncio.wait_for(self.websocket.receive(), self.config.idle_timeout_s)
            except TimeoutError:
                if any(c.state in (ContextState.OPEN, ContextState.ENDED) for c in self.contexts.values()):
                    continue
                self._fail(ProtocolError("idle_timeout", f"no message for {self.config.idle_timeout_s:g} s"))
                return
            if frame["type"] == "websocket.disconnect":
                if frame.get(REFUSED):  # the WebSocket layer refused a frame and has said why
                    self.metrics.errors.labels(frame[REFUSED]).inc()
                return
            text, data = frame.get("text"), frame.get("bytes")
            try:
                size = len(data) if data is not None else len((text or "").encode())
                if size > self.config.max_message_bytes:
                    raise ProtocolError(
                        "message_too_large",
                        f"a frame holds at most {self.config.max_message_bytes} bytes, got {size}",
                    )
                for message in self.dialect.read(text, data):
                    await self._handle(message)
            except ProtocolError as error:
                self._error(error)

    async def _handle(self, message: p.ClientMessage) -> None:
        if isinstance(message, p.Ping):
            self._emit(p.Pong(id=message.id))
        elif isinstance(message, p.Start):
            await self._start(message)
        elif self._settings is None:
            raise ProtocolError(
                "not_started", f"send start before {message.type}", getattr(message, "context_id", None)
            )
        elif isinstance(message, p.Text):
            with _FinishedIsClosed(message.context_id):
                self._text(message)
        elif isinstance(message, p.Flush | p.End):
            context = self._open_context(message.context_id, message.type)
            with _FinishedIsClosed(message.context_id):
                if isinstance(message, p.Flush):
                    context.flush()
                else:
                    context.end()
            if isinstance(message, p.End):
                context.state = ContextState.ENDED
        elif isinstance(message, p.Cancel):
            self._cancel(message.context_id)
        elif isinstance(message, p.Playback):
            context = self._context(message.context_id)
            context.played = message.played_samples
            if message.underruns > context.underruns:
                self.metrics.underruns.inc(message.underruns - context.underruns)
                context.underruns = message.underruns

    async def _start(self, message: p.Start) -> None:
        if self._settings is not None:
            raise ProtocolError(
                "already_started", "this session has started already; open a new socket to change it"
            )
        if message.timestamps == "words" and message.layout == "non_streaming":
            raise ProtocolError(
                "invalid_options",
                "timestamps words needs layout dual_track: non_streaming feeds the talker all text with "
                "the prompt, so no frame tells when a word is spoken",
            )
        settings = await settings_from_start(message, self.engine, self.library, self.caller)
        if message.timestamps == "words":
            loop = asyncio.get_running_loop()
            self._tokens = await loop.run_in_executor(
                self.executor, cached_tokenizer, self.engine.info.folder
            )
        self._settings = settings
        self.state = SessionState.STARTED
        fmt = settings.format
        self._emit(
            p.Ready(
                session_id=self.id,
                encoding=fmt.encoding,
                sample_rate=fmt.sample_rate,
                packet_samples=fmt.packet_samples,
                codec_delay=AudioEncoder(fmt).codec_delay,
                max_contexts=self.config.max_contexts,
            )
        )

    def _text(self, message: p.Text) -> None:
        if len(message.text) > self.config.max_text_chars:
            raise ProtocolError(
                "text_too_long",
                f"a text message holds at most {self.config.max_text_chars} characters, got {len(message.text)}",
                message.context_id,
            )
        context = self.contexts.get(message.context_id)
        if context is None:
            context = self._new_context(message.context_id, 1.0 if message.speed is None else message.speed)
        elif context.state is not ContextState.OPEN:
            raise ProtocolError(
                "context_closed", f"context {message.context_id!r} is {context.state.value}", context.id
            )
        elif message.speed is not None and message.speed != context.speed:
            raise ProtocolError(
                "invalid_options",
                f"context {context.id!r} speaks at speed {context.speed:g}: the text that opens a context "
                "sets its speed",
                context.id,
            )
        if context.chars + len(message.text) > self.config.max_context_chars:
            raise ProtocolError(
                "text_too_long",
                f"a context holds at most {self.config.max_context_chars} characters of text",
                context.id,
            )
        context.chars += len(message.text)
        context.push_text(message.text)
        if message.flush:
            context.flush()

    def _forget_finished(self) -> None:
        """Drop the oldest finished contexts past KEEP_FINISHED (their pumps done)."""
        finished = [
            c.id
            for c in self.contexts.values()
            if c.state in (ContextState.FINISHED, ContextState.CANCELLED)
            and (c.pump is None or c.pump.done())
        ]
        for context_id in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.contexts[context_id]

    def _new_context(self, context_id: str, speed: float) -> Context:
        assert self._settings is not None
        self._forget_finished()
        live = sum(c.state in (ContextState.OPEN, ContextState.ENDED) for c in self.contexts.values())
        if live >= self.config.max_contexts:
            raise ProtocolError(
                "too_many_contexts",
                f"at most {self.config.max_contexts} contexts at once on a socket",
                context_id,
            )
        try:
            # None: no slot is free now; the pump waits for one.
            stream = self._admission.open_now(self._settings.voice, self._settings.options)
        except EngineError as exc:
            raise from_engine(exc, context_id) from None
        tempo = Tempo(speed) if speed != 1 else None
        context = Context(context_id, stream, AudioEncoder(self._settings.format), tempo=tempo)
        if self._tokens is not None:
            # The model reads a word some frames before it speaks it; at a speed, so many frames
            # stretched. A duration, not a position: no flush boundary moves it.
            lag = round(self.config.word_lag_frames * SAMPLES_PER_FRAME / speed)
            context.words = WordTimer(lag * self._settings.format.sample_rate // SAMPLE_RATE)
        self.contexts[context_id] = context
        if stream is not None:
            self._count(context)
        context.pump = asyncio.create_task(self._pump(context))
        return context

    async def _admit(self, context: Context) -> bool:
        """Wait in line for the context's stream; False (and engine_full said) if none came."""
        assert self._settings is not None
        try:
            stream = await self._admission.open_stream(self._settings.voice, self._settings.options)
        except EngineError as exc:
            context.state = ContextState.FINISHED
            with contextlib.suppress(_SlowConsumer):
                self._error(from_engine(exc, context.id))
            return False
        if context.state is ContextState.CANCELLED:  # a cancel that asyncio.wait_for let slip (3.11)
            stream.cancel()
            return False
        context.opened(stream)
        self._count(context)
        return True

    def _context(self, context_id: str) -> Context:
        context = self.contexts.get(context_id)
        if context is None:
            raise ProtocolError("unknown_context", f"no context {context_id!r} on this socket", context_id)
        return context

    def _open_context(self, context_id: str, verb: str) -> Context:
        context = self._context(context_id)
        if context.state is not ContextState.OPEN:
            raise ProtocolError(
                "context_closed",
                f"cannot {verb} context {context_id!r}: it is {context.state.value}",
                context_id,
            )
        return context

    def _cancel(self, context_id: str) -> None:
        context = self._context(context_id)
        if context.state is ContextState.FINISHED and context.done:
            # A barge-in while the client still plays a finished context's audio: nothing to stop
            # here, but `cancelled` says what the listener heard of it, as for one still speaking.
            context.state = ContextState.CANCELLED
            self._report_cancelled(context, context.encoder.sent_samples)
            return
        if context.state not in (ContextState.OPEN, ContextState.ENDED):
            raise ProtocolError(
                "context_closed", f"context {context_id!r} is {context.state.value}", context_id
            )
        # From here on the pump sends nothing for this context; `cancelled` follows once the
        # engine has released the stream.
        context.state = ContextState.CANCELLED
        if context.stream is None:  # still waiting for a slot: it leaves the line, holding nothing
            if context.pump is not None:
                context.pump.cancel()
            self._report_cancelled(context, 0)
            return
        context.stream.cancel()
        self._uncount(context)
        task = asyncio.create_task(self._report_cancel(context))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report_cancel(self, context: Context) -> None:
        assert context.stream is not None
        result = await context.stream.wait()
        generated = context.output_samples(result.samples_generated)
        with contextlib.suppress(_SlowConsumer):
            self._report_cancelled(context, generated)

    def _report_cancelled(self, context: Context, generated: int) -> None:
        """`cancelled`, with `generated` in output samples."""
        sent = context.encoder.sent_samples
        heard = sent if context.played is None else min(context.played, sent)
        self._emit(
            p.Cancelled(
                context_id=context.id,
                samples_generated=generated,
                samples_dropped=max(generated - sent, 0),
                heard_samples=heard,
                heard_text=None if context.words is None else context.words.heard(heard),
            )
        )

    # --- audio out -----------------------------------------------------------------------------

    async def _pump(self, context: Context) -> None:
        if context.stream is None and not await self._admit(context):
            return
        stream = context.stream
        assert stream is not None
        started = time.perf_counter()
        try:
            async for chunk in stream:
                taken = time.monotonic()
                timed = False
                lead = context.lead_samples(chunk)
                if lead:
                    # The first packet here, on the loop (about 0.1 ms of Opus), and out while the
                    # codec threads encode the rest: its listener waits for it, and the thread hop
                    # and the chunk's four packets took 0.76 ms p50 at c=1 (session 60).
                    self._send_audio(context, context.encoder.encode(chunk.pcm[:lead]), chunk, taken)
                    chunk, timed = replace(chunk, pcm=chunk.pcm[lead:]), True
                # A first chunk ahead of chunks whose listeners have seconds in hand, though they
                # came in the same decoder round.
                due = context.due(chunk, taken, self.config.codec_horizon_s)
                packets = await asyncio.wrap_future(self.executor.submit_due(due, context.render, chunk))
                if context.state is ContextState.CANCELLED:
                    return
                self._send_audio(context, packets, chunk, None if timed else taken)
                if chunk.text:
                    self._emit(
                        p.Progress(
                            context_id=context.id,
                            text=chunk.text,
                            text_end=chunk.text_end,
                            pts=context.encoder.sent_samples,
                        )
                    )
                if context.words is not None:
                    self._time_words(context, context.words, chunk)
                if chunk.flushed:
                    self._emit(p.Flushed(context_id=context.id, pts=context.encoder.sent_samples))
                if self.dialect.chunk_sent:
                    self._emit(p.ChunkSent(context_id=context.id))
            if context.state is ContextState.CANCELLED:
                return
            result = await stream.wait()
            context.state = ContextState.FINISHED
            context.done = True
            self._uncount(context)
            samples = context.encoder.sent_samples
            if context.words is not None:
                self._send_words(context, context.words.finish(samples))
            wall = time.perf_counter() - context.opened_at
            self.metrics.speed.observe(samples / context.encoder.format.sample_rate / max(wall, 1e-6))
            self._emit(
                p.Done(
                    context_id=context.id,
                    reason=result.reason,
                    samples=samples,
                    seconds=round(samples / context.encoder.format.sample_rate, 4),
                )
            )
            log.debug("context %s/%s done in %.2f s", self.id, context.id, time.perf_counter() - started)
        except EngineError as exc:
            context.state = ContextState.FINISHED
            self._uncount(context)
            with contextlib.suppress(_SlowConsumer):
                self._error(from_engine(exc, context.id))
        except _SlowConsumer:
            pass  # the session is stopping

    def _send_audio(
        self, context: Context, packets: list[Packet], chunk: AudioChunk, taken: float | None
    ) -> None:
        """Queue `chunk`'s packets; time its delivery from `taken` (None: timed already, from the
        part of it sent first), and the context's first audio if these packets are it."""
        first = bool(packets) and context.seq == 0  # the chunk its first audio waits for
        if chunk.pcm.shape[0] and taken is not None:
            self._time_delivery(chunk, taken, first)
        if first:
            self.metrics.first_audio.observe(time.perf_counter() - context.opened_at)
        for packet in packets:
            self._emit(
                p.Audio(
                    context_id=context.id,
                    seq=context.seq,
                    pts=packet.pts,
                    samples=packet.samples,
                    data=packet.data,
                    final=packet.final,
                )
            )
            context.seq += 1

    def _time_delivery(self, chunk: AudioChunk, taken: float, first: bool) -> None:
        """A chunk's way from the engine's decoder to its audio queued here, whole and in hops;
        `first`: the chunk its context's first audio message came from, also timed apart."""
        encoded = time.monotonic()
        self.metrics.chunk_delivery.observe(encoded - chunk.decoded_at)
        if first:
            self.metrics.first_chunk_delivery.observe(encoded - chunk.decoded_at)
            self.metrics.first_chunk_encode.observe(encoded - taken)
        if chunk.sent_at:  # from an engine process
            self.metrics.chunk_engine_send.observe(chunk.sent_at - chunk.decoded_at)
            self.metrics.chunk_pipe.observe(chunk.received_at - chunk.sent_at)
            self.metrics.chunk_wait.observe(taken - chunk.received_at)
        else:
            self.metrics.chunk_wait.observe(taken - chunk.decoded_at)
        self.metrics.chunk_encode.observe(encoded - taken)

    def _time_words(self, context: Context, timer: WordTimer, chunk: AudioChunk) -> None:
        """The chunk's text enters the timer frame by frame; the words whose start is now sent go out."""
        if chunk.text:
            assert self._tokens is not None
            tokens = [
                (token_id, start) for token_id, (start, _) in self._tokens.encode_with_offsets(chunk.text)
            ]
            pieces = frame_pieces(chunk.text, chunk.text_ids.tolist(), tokens)
            char = chunk.text_end - len(chunk.text)
            for frame, piece in enumerate(pieces):
                if piece:
                    timer.enter(char, piece, context.output_samples(chunk.offset + frame * SAMPLES_PER_FRAME))
                    char += len(piece)
        self._send_words(context, timer.take(context.encoder.sent_samples))

    def _send_words(self, context: Context, words: list[Word]) -> None:
        if words:
            self._emit(p.Words(context_id=context.id, words=[p.WordTiming(**vars(w)) for w in words]))

    def _count(self, context: Context) -> None:
        context.counted = True
        self.metrics.contexts.inc()

    def _uncount(self, context: Context) -> None:
        if context.counted:
            context.counted = False
            self.metrics.contexts.dec()

    def _emit(self, message: p.ServerMessage) -> None:
        if self._fatal is not None:
            return
        seconds = self._audio_seconds(message)
        try:
            if self._queued_audio_s + seconds > self.config.send_buffer_s:
                raise asyncio.QueueFull
            self._outbox.put_nowait(message)
        except asyncio.QueueFull:
            self._fail(ProtocolError("slow_consumer", "the client stopped reading; audio backed up"))
            raise _SlowConsumer from None
        self._queued_audio_s += seconds
        if seconds:
            assert isinstance(message, p.Audio)  # only audio has seconds
            context = self.contexts.get(message.context_id)
            if context is not None:
                gap = context.queued.add(time.monotonic(), seconds)
                if gap > 0:
                    self.metrics.queued_player_gap.observe(gap)

    def _audio_seconds(self, message: p.ServerMessage | None) -> float:
        if not isinstance(message, p.Audio) or self._settings is None:
            return 0.0
        return message.samples / self._settings.format.sample_rate

    def _error(self, error: ProtocolError) -> None:
        log.info("session %s: %s", self.id, error)
        self.metrics.errors.labels(error.code).inc()
        if error.fatal:
            self._fail(error)
        else:
            self._emit(
                p.Error(code=error.code, message=error.message, context_id=error.context_id, fatal=False)
            )

    async def _send_loop(self) -> None:
        # Where the WebSocket layer takes many frames in one send (server.wire.FRAMES), the messages
        # queued together go together: a chunk's packets are queued at once.
        batched = FRAMES in (self.websocket.scope.get("extensions") or {})
        while True:
            batch = [await self._outbox.get()]
            while (
                batched and len(batch) < SEND_BATCH and not self._outbox.empty() and self._sends_on(batch[-1])
            ):
                batch.append(self._outbox.get_nowait())
            messages = [message for message in batch if message is not None]
            frames = [encoded for message in messages for encoded in self.dialect.write(message)]
            if batched and frames:
                await self.websocket.send({"type": "websocket.send", FRAMES: frames})
            else:
                for encoded in frames:
                    if isinstance(encoded, bytes):
                        await self.websocket.send_bytes(encoded)
                    else:
                        await self.websocket.send_text(encoded)
            for message in messages:
                # Asked again after the write: a dialect's answer may depend on what writing the
                # message changed (ElevenLabs closes once the last context's final message is out).
                close = self.dialect.closes_after(message)
                if close is not None:
                    self._close_code = close
                    self._stop.set()
                if isinstance(message, p.Audio):
                    seconds = self._audio_seconds(message)
                    self._queued_audio_s -= seconds
                    self._played(message.context_id, seconds)
            if len(messages) < len(batch):  # None: the last message is out
                return

    def _sends_on(self, message: p.ServerMessage | None) -> bool:
        """Whether a batch goes on after `message` (neither the end nor a message that closes the
        socket, as far as the dialect can tell before writing it)."""
        return message is not None and self.dialect.closes_after(message) is None

    def _played(self, context_id: str, seconds: float) -> None:
        """`seconds` of a context's audio are on the socket: what a listener here would hear."""
        context = self.contexts.get(context_id)
        if context is not None:
            gap = context.player.add(time.monotonic(), seconds)
            if gap > 0:
                self.metrics.socket_player_gap.observe(gap)

    async def _shutdown(self, sender: asyncio.Task) -> None:
        self.state = SessionState.CLOSED
        for context in self.contexts.values():
            if context.state in (ContextState.OPEN, ContextState.ENDED):
                context.state = ContextState.CANCELLED
                if context.stream is not None:  # a waiting one leaves the line with its pump
                    context.stream.cancel()
            self._uncount(context)
        pumps = [c.pump for c in self.contexts.values() if c.pump is not None]
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        fatal = self._fatal
        if fatal is not None and fatal.code == "slow_consumer":
            # The client stopped reading: what is queued for it would reach it too late to play. Drop
            # it and say why at once. A send cancelled while it waits for the socket has written
            # nothing, and UNPACED is written without waiting (server.wire.WireProtocol).
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            while not self._outbox.empty():
                self._outbox.get_nowait()
            self._queued_audio_s = 0.0
            for encoded in self.dialect.write(p.Error(code=fatal.code, message=fatal.message, fatal=True)):
                key = "bytes" if isinstance(encoded, bytes) else "text"
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self.websocket.send({"type": "websocket.send", key: encoded, UNPACED: True}),
                        timeout=1,
                    )
        else:
            with contextlib.suppress(asyncio.QueueFull):
                if fatal is not None:  # queued messages go out first, then why it closes
                    self._outbox.put_nowait(p.Error(code=fatal.code, message=fatal.message, fatal=True))
                self._outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sender, timeout=5)
            sender.cancel()
        # The close frame does not wait for the client to read either; a client that never answers
        # it is cut off after the WebSocket layer's close timeout.
        with contextlib.suppress(Exception):
            code = self.dialect.close_code(fatal) if fatal else self._close_code
            await asyncio.wait_for(self.websocket.close(code=code), timeout=1)
