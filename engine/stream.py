"""The public stream handle: text in (`push_text`, `flush`, `end`, `cancel`), audio chunks out.

A `Stream` is shared by three threads: the caller's (text in, chunks out, usually an asyncio loop),
the scheduler's (reads the inbox) and the decoder's (delivers chunks). Text is tokenized in the
caller's thread; everything after that is handed over through a locked inbox and the loop's
thread-safe callbacks. A stream opened with a `StreamListener` instead hands its chunks and result
to it, in the engine's threads (the engine process forwards them to its parent that way).
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voicewire.engine.config import StreamOptions
from voicewire.engine.errors import EngineError, StreamClosed
from voicewire.engine.prompt import Voice
from voicewire.engine.text_stream import IncrementalTokenizer, TextToken
from voicewire.engine.text_tokenizer import TextTokenizer

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920


@dataclass(frozen=True)
class AudioChunk:
    pcm: np.ndarray  # float32 [n] at 24 kHz, only the new samples
    offset: int  # samples of this stream before this chunk
    codes: np.ndarray  # int64 [frames, 16]: the codec frames this chunk decodes (n = frames * 1920)
    text_ids: np.ndarray  # int64 [frames]: the text-track id each frame was fed (text, tts_eos, tts_pad)
    text: str  # text that entered the talker during these frames
    text_end: int  # characters of the pushed text the talker has consumed so far
    flushed: bool = False  # the audio of everything before a flush() is complete with this chunk
    final: bool = False  # the last chunk of the stream
    # time.monotonic() as the decoder let it go: CLOCK_MONOTONIC, one clock for every process on
    # the host, so a server process can time the chunk's way from the engine process.
    decoded_at: float = 0.0

    @property
    def frames(self) -> int:
        return self.codes.shape[0]


@dataclass(frozen=True)
class StreamResult:
    reason: str  # "end", "max_frames", "cancelled" or "error"
    frames: int
    samples_generated: int
    samples_delivered: int  # handed to the consumer; the rest was dropped (cancel, error)
    end_step: int  # scheduler step at which the stream released its slot
    error: EngineError | None = None


class Mark(enum.Enum):
    FLUSH = "flush"
    END = "end"


def caller_loop() -> asyncio.AbstractEventLoop:
    """The running event loop a stream's audio will be read in; opening a stream needs one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("open_stream must be called inside a running asyncio event loop") from None


class StreamListener(Protocol):
    """Takes a stream's chunks and result in the engine's threads; must not block."""

    def chunk(self, stream: Stream, chunk: AudioChunk) -> None: ...

    def finished(self, stream: Stream, result: StreamResult) -> None: ...


class Done:
    """Chunk-queue sentinel: no more chunks."""


def chunk_or_end(item: AudioChunk | type[Done], cancelled: bool, result: StreamResult | None) -> AudioChunk:
    """What a stream's iterator makes of the next queue item: the chunk, or the end (raising the
    stream's error when it failed)."""
    if item is Done or cancelled:
        if result is not None and result.error is not None:
            raise result.error
        raise StopAsyncIteration
    assert isinstance(item, AudioChunk)
    return item


class Stream:
    """One utterance stream. Iterate it (`async for chunk in stream`) for its audio."""

    def __init__(
        self,
        stream_id: int,
        voice: Voice,
        options: StreamOptions,
        tokenizer: TextTokenizer,
        wake: Callable[[], None],
        listener: StreamListener | None = None,
    ) -> None:
        self.id = stream_id
        self.voice = voice
        self.options = options
        self._tokens = IncrementalTokenizer(tokenizer)
        self._wake = wake
        self._listener = listener
        self._lock = threading.Lock()
        self._inbox: list[TextToken | Mark] = []
        self._ended = False
        self._cancel_requested = False
        self._aborted = False  # the engine gave up on it (decoder failure, consumer gone)
        self._result: StreamResult | None = None
        self._finished = threading.Event()
        self.first_text_at: float | None = None  # time.monotonic() of the first push_text (metrics)
        self.consumed_samples = 0  # read by the consumer
        self.delivered_samples = 0  # put in the chunk queue by the decoder stage
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._chunks: asyncio.Queue[AudioChunk | type[Done]] | None = None
        self._done: asyncio.Event | None = None
        if self._loop is not None and listener is None:
            self._chunks, self._done = asyncio.Queue(), asyncio.Event()

    # --- caller side ---------------------------------------------------------------------------

    def push_text(self, text: str) -> None:
        """Append text; it is spoken as soon as enough of it has arrived."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        with self._lock:
            self._check_open()
            if self.first_text_at is None:
                self.first_text_at = time.monotonic()
            self._inbox.extend(self._tokens.push(text))
        self._wake()

    def flush(self) -> None:
        """Speak everything pushed so far now, the trailing partial word included."""
        with self._lock:
            self._check_open()
            self._inbox.extend(self._tokens.flush())
            self._inbox.append(Mark.FLUSH)
        self._wake()

    def end(self) -> None:
        """No more text: speak what is left, then finish."""
        with self._lock:
            self._check_open()
            self._inbox.extend(self._tokens.flush())
            self._inbox.append(Mark.END)
            self._ended = True
        self._wake()

    def cancel(self) -> None:
        """Stop now: no chunk is yielded after this returns; the engine frees the stream's slot."""
        with self._lock:
            self._cancel_requested = True
        if self._loop is not None and self._chunks is not None:
            self._call_in_loop(self._chunks.put_nowait, Done)
        self._wake()

    def _check_open(self) -> None:
        if self._cancel_requested:
            raise StreamClosed(f"stream {self.id} was cancelled")
        if self._ended:
            raise StreamClosed(f"stream {self.id} has ended; open a new stream for more text")
        if self._result is not None:
            raise StreamClosed(f"stream {self.id} is finished ({self._result.reason})")

    def acknowledge(self, consumed_samples: int) -> None:
        """A listener's consumer has read this many samples in all (backpressure counts unread ones)."""
        self.consumed_samples = max(self.consumed_samples, consumed_samples)
        self._wake()

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> AudioChunk:
        if self._chunks is None:
            raise RuntimeError("iterate a stream in the event loop it was opened in")
        if self._cancel_requested:
            raise StopAsyncIteration
        item = chunk_or_end(await self._chunks.get(), self._cancel_requested, self._result)
        self.consumed_samples += item.pcm.shape[0]
        self._wake()  # a stream paused for being too far ahead may go on
        return item

    async def wait(self) -> StreamResult:
        """Wait until the engine has released the stream; returns how it ended."""
        if self._done is None:
            raise RuntimeError("wait for a stream in the event loop it was opened in")
        await self._done.wait()
        assert self._result is not None
        return self._result

    @property
    def result(self) -> StreamResult | None:
        return self._result

    # --- engine side ---------------------------------------------------------------------------

    def take_inbox(self) -> tuple[list[TextToken | Mark], bool]:
        """(new tokens and marks, cancel requested), for the scheduler."""
        with self._lock:
            items, self._inbox = self._inbox, []
            return items, self._cancel_requested or self._aborted

    def abort(self) -> None:
        """Engine side: stop generating for this stream (its result is already set)."""
        self._aborted = True

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested

    @property
    def unread_samples(self) -> int:
        """Audio waiting in the chunk queue (what backpressure bounds)."""
        return self.delivered_samples - self.consumed_samples

    def deliver(self, chunk: AudioChunk) -> None:
        self.delivered_samples += chunk.pcm.shape[0]
        if self._listener is not None:
            if not self._cancel_requested:
                self._listener.chunk(self, chunk)
        elif self._chunks is not None and not self._cancel_requested:
            self._call_in_loop(self._chunks.put_nowait, chunk)

    def finish(self, result: StreamResult) -> None:
        self._result = result
        self._finished.set()
        if self._listener is not None:
            self._listener.finished(self, result)
        elif self._chunks is not None and self._done is not None:
            self._call_in_loop(self._chunks.put_nowait, Done)
            self._call_in_loop(self._done.set)

    def _call_in_loop(self, fn: Callable, *args: object) -> None:
        assert self._loop is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            fn(*args)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening any more
            self._aborted = True
