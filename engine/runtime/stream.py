"""A stream as the engine holds it: text in through a locked inbox, chunks and the result out to a
`StreamListener`.

A `Stream` is shared by three threads: its controller's (text in; the caller's `StreamHandle` in
engine/runtime/handle.py, or the engine process's reader for a remote one), the scheduler's (reads the
inbox) and the decoder's (delivers chunks). Text comes in as committed tokens (`push_tokens`):
`push_text` tokenizes in the controller's thread; a server worker of the engine process tokenizes
in its own process and sends the tokens (engine/runtime/engine_process.py).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voicewire.engine.config import StreamOptions
from voicewire.engine.errors import EngineError, StreamClosed
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime.text_stream import IncrementalTokenizer, TextToken
from voicewire.engine.voice import Voice

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
    # From an engine process: when its batch was written there, and read here (0: in process).
    sent_at: float = 0.0
    received_at: float = 0.0

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


def check_open(stream_id: int, cancelled: bool, ended: bool, result: StreamResult | None) -> None:
    """Raise StreamClosed, saying why, unless a stream still takes text (the engine's stream and
    its caller's handle each keep these three facts as they learn them)."""
    if cancelled:
        raise StreamClosed(f"stream {stream_id} was cancelled")
    if ended:
        raise StreamClosed(f"stream {stream_id} has ended; open a new stream for more text")
    if result is not None:
        raise StreamClosed(f"stream {stream_id} is finished ({result.reason})")


class StreamListener(Protocol):
    """Takes a stream's chunks and result in the engine's threads; must not block."""

    def chunk(self, stream: Stream, chunk: AudioChunk) -> None: ...

    def finished(self, stream: Stream, result: StreamResult) -> None: ...


class Stream:
    """One utterance stream in the engine. Its controller pushes text and marks; the scheduler
    takes them; the decoder stage hands its chunks and result to its listener."""

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
        self._tokens = IncrementalTokenizer(tokenizer)  # push_text's; a remote controller has its own
        self._wake = wake
        self._listener = listener
        self._lock = threading.Lock()
        self._inbox: list[TextToken | Mark] = []
        self._ended = False
        self._cancel_requested = False
        self._aborted = False  # the engine gave up on it (decoder failure, consumer gone)
        self._result: StreamResult | None = None
        self.first_text_at: float | None = None  # time.monotonic() of the first text pushed (metrics)
        self.consumed_samples = 0  # read by the consumer, as acknowledged
        self.delivered_samples = 0  # handed to the listener by the decoder stage

    # --- controller side -----------------------------------------------------------------------

    def push_text(self, text: str) -> None:
        """Append text; it is spoken as soon as enough of it has arrived."""
        self.push_tokens(self._tokens.push(text))

    def flush(self) -> None:
        """Speak everything pushed so far now, the trailing partial word included."""
        self.push_tokens(self._tokens.flush(), Mark.FLUSH)

    def end(self) -> None:
        """No more text: speak what is left, then finish."""
        self.push_tokens(self._tokens.flush(), Mark.END)

    def push_tokens(self, tokens: list[TextToken], mark: Mark | None = None) -> None:
        """Take text its controller tokenized (`IncrementalTokenizer`, one per stream): `tokens`,
        the committed ones (perhaps none), then `mark` if any (a flush or the end, its tokens the
        tokenizer's flushed tail). Without a mark this is a push of text, and the first one sets
        `first_text_at`, whether it committed a token or not."""
        with self._lock:
            self._check_open()
            if mark is None and self.first_text_at is None:
                self.first_text_at = time.monotonic()
            self._inbox.extend(tokens)
            if mark is not None:
                self._inbox.append(mark)
            if mark is Mark.END:
                self._ended = True
        self._wake()

    def cancel(self) -> None:
        """Stop: no chunk reaches the listener after this; the engine frees the stream's slot."""
        with self._lock:
            self._cancel_requested = True
        self._wake()

    def _check_open(self) -> None:
        check_open(self.id, self._cancel_requested, self._ended, self._result)

    def acknowledge(self, consumed_samples: int) -> None:
        """The consumer has read this many samples in all (backpressure counts unread ones)."""
        self.consumed_samples = max(self.consumed_samples, consumed_samples)
        self._wake()

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
        """Engine side: stop generating for this stream (its consumer is gone, or it failed)."""
        self._aborted = True
        self._wake()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested

    @property
    def unread_samples(self) -> int:
        """Audio delivered and not yet read (what backpressure bounds)."""
        return self.delivered_samples - self.consumed_samples

    def deliver(self, chunk: AudioChunk) -> None:
        self.delivered_samples += chunk.pcm.shape[0]
        if self._listener is not None and not self._cancel_requested:
            self._listener.chunk(self, chunk)

    def finish(self, result: StreamResult) -> None:
        self._result = result
        if self._listener is not None:
            self._listener.finished(self, result)
