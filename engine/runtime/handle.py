"""The caller's handle on a stream: text in (`push_text`, `flush`, `end`, `cancel`), audio out
(`async for chunk in handle`), `wait()` for how it ended.

One class, whatever runs the engine: a handle sends its requests to a `StreamControl` (the engine's
own `Stream` in this process, or a pipe to the engine process) and is fed its chunks and result in
the event loop it was opened in. Everything here runs in that loop.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from voicewire.engine.config import StreamOptions
from voicewire.engine.errors import InvalidText
from voicewire.engine.runtime.stream import AudioChunk, StreamResult, check_open
from voicewire.engine.voice import Voice


class StreamControl(Protocol):
    """Where a handle's requests go. Calls come from the handle's event loop and must not block."""

    def push_text(self, text: str) -> None: ...

    def flush(self) -> None: ...

    def end(self) -> None: ...

    def cancel(self) -> None: ...

    def acknowledge(self, consumed_samples: int) -> None: ...


class _Done:
    """Chunk-queue sentinel: no more chunks."""


def caller_loop() -> asyncio.AbstractEventLoop:
    """The running event loop a stream's audio will be read in; opening a stream needs one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("open_stream must be called inside a running asyncio event loop") from None


def check_text(text: object) -> str:
    """Text a stream can take: a str that UTF-8 can encode (a lone surrogate cannot be tokenized)."""
    if not isinstance(text, str):
        raise InvalidText(f"text must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidText(
            f"text holds a character UTF-8 cannot encode at {exc.start}: {exc.reason}"
        ) from None
    return text


class StreamHandle:
    """One utterance stream, as its caller holds it. Iterate it for its audio chunks."""

    def __init__(self, stream_id: int, voice: Voice, options: StreamOptions, control: StreamControl) -> None:
        self.id = stream_id
        self.voice = voice
        self.options = options
        self.loop = caller_loop()
        self._control = control
        self._chunks: asyncio.Queue[AudioChunk | type[_Done]] = asyncio.Queue()
        self._done = asyncio.Event()
        self._result: StreamResult | None = None
        self._ended = False
        self._cancelled = False
        self.consumed_samples = 0  # read by the caller
        self.delivered_samples = 0  # handed to this handle by the engine

    # --- requests ------------------------------------------------------------------------------

    def push_text(self, text: str) -> None:
        """Append text; it is spoken as soon as enough of it has arrived. Raises InvalidText for
        text that is not a string or that UTF-8 cannot encode; the stream stays usable."""
        check_text(text)
        self._check_open()
        self._control.push_text(text)

    def flush(self) -> None:
        """Speak everything pushed so far now, the trailing partial word included."""
        self._check_open()
        self._control.flush()

    def end(self) -> None:
        """No more text: speak what is left, then finish."""
        self._check_open()
        self._ended = True
        self._control.end()

    def cancel(self) -> None:
        """Stop now: no chunk is yielded after this returns; the engine frees the stream's slot."""
        if self._cancelled:
            return
        self._cancelled = True
        self._chunks.put_nowait(_Done)
        if self._result is None:
            self._control.cancel()

    def _check_open(self) -> None:
        check_open(self.id, self._cancelled, self._ended, self._result)

    # --- audio out -----------------------------------------------------------------------------

    def __aiter__(self) -> StreamHandle:
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
            self._control.acknowledge(self.consumed_samples)
        return item

    async def wait(self) -> StreamResult:
        """Wait until the engine has released the stream; returns how it ended."""
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def result(self) -> StreamResult | None:
        return self._result

    @property
    def unread_samples(self) -> int:
        """Audio handed to this handle and not read yet."""
        return self.delivered_samples - self.consumed_samples

    # --- fed by the engine, in this handle's loop ----------------------------------------------

    def deliver(self, chunk: AudioChunk) -> None:
        if not self._cancelled:
            self.delivered_samples += chunk.pcm.shape[0]
            self._chunks.put_nowait(chunk)

    def finish(self, result: StreamResult) -> None:
        if self._result is not None:
            return
        self._result = result
        self._chunks.put_nowait(_Done)
        self._done.set()
