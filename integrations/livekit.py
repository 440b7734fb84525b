"""voicewire as a LiveKit Agents TTS (`pip install 'voicewire[livekit]'`; docs/integrations.md).

    session = AgentSession(tts=voicewire.integrations.livekit.TTS(voice="vivian"), ...)

Each `SynthesizeStream` (one agent turn) is one protocol context: text goes out as the LLM writes
it, the framework's `flush()` is a protocol `flush`, the end of input is `end`, and audio comes
back as 16-bit PCM at `sample_rate`. The server's word timing becomes LiveKit's timed transcripts,
so the transcript follows the voice. When LiveKit closes a stream mid-turn (an interruption), the
context is cancelled on the server at once. `synthesize()` is one context with its whole text.

Turns share one socket (a socket carries up to the server's `max_contexts` at once). A socket the
server closed is replaced on the next turn; a refused key, voice or format is an `APIStatusError`
that LiveKit does not retry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from typing import Any

import msgpack
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    APITimeoutError,
    tts,
    utils,
)
from livekit.agents.voice.io import TimedString
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from voicewire.integrations.common import (
    MSGPACK,
    Sampling,
    VoicewireError,
    closed_error,
    connect_headers,
    handshake,
    start_message,
    stream_url,
)

__all__ = ["TTS", "ChunkedStream", "Sampling", "SynthesizeStream"]

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 30.0  # `ready` waits for the voice (a stored one is loaded from the library)
# How LiveKit reads a server error: APIStatusError retries 5xx, 408 and 429, never another 4xx.
_STATUS = {"unauthorized": 401, "forbidden_origin": 403, "too_many_sessions": 429, "engine_full": 503}
# Turn errors that a retry, which sends the same text again, would meet again.
_SAME_AGAIN = frozenset({"text_too_long", "message_too_large"})


def _api_error(error: VoicewireError) -> APIStatusError:
    retryable = not (error.permanent or error.code in _SAME_AGAIN)
    status = _STATUS.get(error.code, 500 if retryable else 400)
    message = str(error)
    if error.code == "unauthorized":
        message += " (check api_key or $VOICEWIRE_API_KEY)"
    return APIStatusError(
        message,
        status_code=status,
        body={"code": error.code, "message": error.message},
        retryable=retryable,
    )


def _closed_error(closed: ConnectionClosed) -> APIError:
    error = closed_error(closed)
    if error.code != "closed":  # a refusal whose error message was not read
        return _api_error(error)
    return APIConnectionError(f"voicewire closed the connection: {error.message}")


class _Context:
    """One turn on a socket: its text so far (word spans index it), and its messages, handed over
    by the socket's reader."""

    def __init__(self, socket: _Socket, context_id: str) -> None:
        self.socket = socket
        self.id = context_id
        self.text_sent = ""
        self.ended = False  # `end` is sent: no more text
        self.finished = False  # `done` or `cancelled` came: the server has let it go
        self.abandoned = False  # its stream is gone: messages still on their way are dropped
        self._messages: asyncio.Queue[dict[str, Any] | APIError] = asyncio.Queue()
        self._covered = 0  # characters of text_sent already in a timed transcript

    def text(self, text: str) -> None:
        self.text_sent += text
        self.socket.send({"type": "text", "context_id": self.id, "text": text})

    def flush(self) -> None:
        self.socket.send({"type": "flush", "context_id": self.id})

    def end(self) -> None:
        self.ended = True
        self.socket.send({"type": "end", "context_id": self.id})

    def close(self) -> None:
        """The stream is done with this context: cancel it unless the server finished it."""
        if self.finished or self.abandoned:
            return
        self.abandoned = True
        if self.socket.error is None:
            self.socket.send({"type": "cancel", "context_id": self.id})

    def deliver(self, message: dict[str, Any] | APIError) -> None:
        if not self.abandoned:
            self._messages.put_nowait(message)

    async def next(self) -> dict[str, Any]:
        """The context's next message; its `error`, or the socket's end, raises an APIError."""
        message = await self._messages.get()
        if isinstance(message, APIError):
            raise message
        if message["type"] == "error":
            raise _api_error(VoicewireError.from_message(message))
        return message

    def timed(self, words: list[dict[str, Any]], sample_rate: int) -> list[TimedString]:
        """A `words` message as LiveKit's timed strings: each word with the spaces after it (and
        the first with those before it), so that the strings join back into the text."""
        timed = []
        for word in words:
            end = word["end_char"]
            while end < len(self.text_sent) and self.text_sent[end].isspace():
                end += 1
            timed.append(
                TimedString(
                    self.text_sent[self._covered : end],
                    start_time=word["start"] / sample_rate,
                    end_time=word["end"] / sample_rate,
                )
            )
            self._covered = end
        return timed


class _Socket:
    """One protocol-v1 session that turns share: `start` once, then a context per turn. A reader
    task hands each message to its context; one writer task sends, so that a stream being torn down
    can still queue its `cancel`."""

    def __init__(self, ws: ClientConnection, ready: dict[str, Any]) -> None:
        self._ws = ws
        self.max_contexts: int = ready["max_contexts"]
        self.error: APIError | None = None  # why the socket ended, once it has
        self._fatal: VoicewireError | None = None  # a fatal `error`, read before the close
        self._contexts: dict[str, _Context] = {}  # until done or cancelled
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._tasks = (asyncio.create_task(self._read()), asyncio.create_task(self._write()))

    @classmethod
    async def open(cls, url: str, api_key: str | None, start: dict[str, Any], timeout: float) -> _Socket:
        try:
            ws = await connect(
                url,
                subprotocols=[Subprotocol(MSGPACK)],
                additional_headers=connect_headers(api_key),
                open_timeout=timeout,
            )
        except InvalidStatus as exc:  # refused at the handshake (an origin or subprotocol)
            status = exc.response.status_code
            raise APIStatusError(f"voicewire refused the socket: HTTP {status}", status_code=status) from None
        except (TimeoutError, asyncio.TimeoutError):
            raise APITimeoutError(f"no answer from {url} in {timeout:g} s") from None
        except (OSError, InvalidHandshake) as exc:
            raise APIConnectionError(f"cannot reach voicewire at {url}") from exc
        try:
            ready = await handshake(ws, start, READY_TIMEOUT_S)
        except VoicewireError as error:
            await ws.close()
            raise _api_error(error) if error.code != "closed" else APIConnectionError(str(error)) from None
        except (TimeoutError, asyncio.TimeoutError):
            await ws.close()
            raise APITimeoutError(f"voicewire sent no ready in {READY_TIMEOUT_S:g} s") from None
        logger.debug("voicewire session %s open", ready["session_id"])
        return cls(ws, ready)

    @property
    def has_room(self) -> bool:
        return self.error is None and len(self._contexts) < self.max_contexts

    def context(self) -> _Context:
        context = _Context(self, f"lk-{utils.shortuuid()}")
        self._contexts[context.id] = context
        return context

    def send(self, message: dict[str, Any]) -> None:
        if self.error is None:
            self._outbox.put_nowait(message)

    async def _write(self) -> None:
        while (message := await self._outbox.get()) is not None:
            try:
                await self._ws.send(msgpack.packb(message))
            except ConnectionClosed:
                return  # the reader says why

    async def _read(self) -> None:
        error: APIError = APIConnectionError("voicewire closed the connection")
        try:
            async for frame in self._ws:
                self._dispatch(msgpack.unpackb(frame))
        except ConnectionClosed as closed:
            error = _closed_error(closed)
        except Exception as exc:  # a frame that is not msgpack: a server this plugin cannot speak to
            error = APIConnectionError(f"voicewire sent what this client cannot read: {exc!r}")
        if self._fatal is not None:
            error = _api_error(self._fatal)
        self._end(error)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        context = self._contexts.get(message.get("context_id") or "")
        if context is None:
            if kind == "error" and message.get("fatal"):
                self._fatal = VoicewireError.from_message(message)  # the close follows
            elif kind == "error":
                logger.warning("voicewire: %s", VoicewireError.from_message(message))
            return  # otherwise the tail of a context that was let go
        if kind in ("done", "cancelled") or (kind == "error" and context.abandoned):
            # An abandoned context's error answers its cancel: it had finished already.
            del self._contexts[context.id]
            context.finished = True
        if kind == "cancelled":
            logger.debug(
                "voicewire cancelled %s after %d samples, heard %r",
                context.id,
                message.get("heard_samples", 0),
                message.get("heard_text"),
            )
        context.deliver(message)

    def _end(self, error: APIError) -> None:
        if self.error is not None:
            return
        self.error = error
        for context in self._contexts.values():
            context.deliver(error)
        self._contexts.clear()
        self._outbox.put_nowait(None)

    async def aclose(self) -> None:
        self._end(APIConnectionError("the voicewire TTS was closed"))
        await self._ws.close()
        await utils.aio.cancel_and_wait(*self._tasks)


async def _receive(context: _Context, emitter: tts.AudioEmitter, sample_rate: int) -> None:
    """A context's audio and words into LiveKit's emitter, until it is done."""
    while True:
        message = await context.next()
        kind = message["type"]
        if kind == "audio":
            emitter.push(message["data"])
        elif kind == "words":
            emitter.push_timed_transcript(context.timed(message["words"], sample_rate))
        elif kind == "flushed" and not context.ended:
            # The text so far is all spoken and more may come: hand over the tail the emitter
            # holds back to mark the segment's last frame. (After `end`, `done` follows at once;
            # flushing then would end the segment on a 10 ms silence of the emitter's own.)
            emitter.flush()
        elif kind in ("done", "cancelled"):
            return


class TTS(tts.TTS):
    """LiveKit Agents' TTS speaking voicewire's protocol v1.

    Args:
        voice: a speaker name (CustomVoice checkpoints) or a stored voice id (`voice_...`).
        url: the server's base address (ws://, wss://, http:// or https://).
        language: a BCP 47 code or a name ("english"); None: the model's own detection.
        api_key: the server's API key (default: $VOICEWIRE_API_KEY; none for an open server).
        sample_rate: output rate (8000, 16000, 22050, 24000, 32000, 44100 or 48000).
        sampling: the talker's sampling; a `seed` makes each turn repeatable.
    """

    def __init__(
        self,
        *,
        voice: str,
        url: str = "ws://127.0.0.1:8000",
        language: str | None = None,
        api_key: str | None = None,
        sample_rate: int = 24000,
        sampling: Sampling | None = None,
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._url = stream_url(url)
        self._api_key = api_key if api_key is not None else os.environ.get("VOICEWIRE_API_KEY")
        # Checks the voice and rate now rather than at the first turn.
        self._start = start_message(
            voice=voice, language=language, sample_rate=sample_rate, sampling=sampling
        )
        self._sockets: list[_Socket] = []
        self._connecting = asyncio.Lock()
        self._streams: weakref.WeakSet[SynthesizeStream] = weakref.WeakSet()
        self._prewarm: asyncio.Task[None] | None = None

    @property
    def provider(self) -> str:
        return "voicewire"

    async def _socket(self, timeout: float) -> _Socket:
        """A live socket with room for one more context, opened if there is none."""
        async with self._connecting:
            for dead in [s for s in self._sockets if s.error is not None]:
                self._sockets.remove(dead)
                await dead.aclose()
            socket = next((s for s in self._sockets if s.has_room), None)
            if socket is None:
                socket = await _Socket.open(self._url, self._api_key, self._start, timeout)
                self._sockets.append(socket)
            return socket

    async def _context(self, timeout: float) -> _Context:
        return (await self._socket(timeout)).context()

    def prewarm(self) -> None:
        async def warm() -> None:
            try:
                await self._socket(DEFAULT_API_CONNECT_OPTIONS.timeout)
            except APIError as exc:
                logger.debug("voicewire prewarm: %s", exc)  # the first turn will say so

        self._prewarm = asyncio.create_task(warm())

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> ChunkedStream:
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        if self._prewarm is not None:
            await utils.aio.cancel_and_wait(self._prewarm)
        async with self._connecting:
            for socket in self._sockets:
                await socket.aclose()
            self._sockets.clear()


def _initialize(emitter: tts.AudioEmitter, sample_rate: int, stream: bool) -> None:
    """The emitter takes the server's raw 16-bit PCM as it comes (`stream`: in segments)."""
    emitter.initialize(
        request_id=utils.shortuuid(),
        sample_rate=sample_rate,
        num_channels=1,
        mime_type="audio/pcm",
        stream=stream,
    )


class ChunkedStream(tts.ChunkedStream):
    """`TTS.synthesize`: one context with the whole text."""

    def __init__(self, *, tts: TTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        _initialize(output_emitter, self._tts.sample_rate, stream=False)
        if not self._input_text.strip():
            return
        context = await self._tts._context(self._conn_options.timeout)
        try:
            context.text(self._input_text)
            context.end()
            await _receive(context, output_emitter, self._tts.sample_rate)
        finally:
            context.close()


class SynthesizeStream(tts.SynthesizeStream):
    """`TTS.stream`: one context, opened by the first text and fed as text comes."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        _initialize(output_emitter, self._tts.sample_rate, stream=True)
        first = None
        async for item in self._input_ch:  # a flush before any text has nothing to flush
            if isinstance(item, str):
                first = item
                break
        if first is None:
            return  # the input ended without text: nothing to open
        context = await self._tts._context(self._conn_options.timeout)
        output_emitter.start_segment(segment_id=context.id)
        self._mark_started()
        context.text(first)
        sender = asyncio.create_task(self._send(context))
        try:
            await _receive(context, output_emitter, self._tts.sample_rate)
            output_emitter.end_segment()
        finally:
            # Also on cancellation (LiveKit's aclose on an interruption): the cancel is queued on
            # the socket's writer, which outlives this task.
            context.close()
            await utils.aio.cancel_and_wait(sender)

    async def _send(self, context: _Context) -> None:
        async for item in self._input_ch:
            if isinstance(item, str):
                context.text(item)
            else:
                context.flush()
        context.end()
