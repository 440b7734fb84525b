"""The streams a talker backend holds, from `submit` to release, written once for both backends.

`LiveStream` is a backend's record of one stream; `LiveStreams` is the table of them: slots and
EngineFull at `submit` (any thread), then, in the backend's own loop, admission of the submitted
streams, draining each stream's text, marks and cancel into its segments, and release (the decoder
told how the stream ended, its slot free). Each backend owns its loop and what it keeps per stream
beyond this record, in a subclass of `LiveStream`: the torch backend its KV slot's sequence, the
vllm backend its running request.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from voicewire.engine.config import GenerationOptions
from voicewire.engine.errors import EngineError, EngineFull, StreamFailed
from voicewire.engine.model.prompt import VoicePrompt, build_voice_prompt
from voicewire.engine.model.qwen3_tts import ModelParts
from voicewire.engine.model.sampling import resolve_seed
from voicewire.engine.runtime.backend import FrameSink
from voicewire.engine.runtime.segments import SegmentPolicy, SegmentQueue
from voicewire.engine.runtime.stream import Mark, Stream
from voicewire.engine.runtime.text_stream import TextToken

log = logging.getLogger(__name__)

# How a stream that was not cancelled and did not fail can end: its text spoken, its frame cap,
# or its last sequence ended by the speech guard (config.SpeechGuard).
CLOSED = ("end", "max_frames", "length")


@dataclass(eq=False)  # identity: list membership and removal must not compare every field
class LiveStream:
    """A backend's state for one stream. `slot` is its row in the torch backend's batched tensors;
    the vllm backend holds one too, so that both count capacity the same way."""

    stream: Stream
    options: GenerationOptions
    lookahead: int
    segments: SegmentQueue
    slot: int
    seed: int  # its noise seed, resolved once at submit
    voice: VoicePrompt | None = None  # built at admission
    frames: int = 0  # handed to the decoder
    # Text tokens its running sequence's prompt holds, reported with its next frame.
    prefilled: list[TextToken] = field(default_factory=list)
    ended: bool = False  # its END mark is in its segments
    released: bool = False
    starved: bool = False  # waiting for text, and the decoder was told to send what it holds
    cut: bool = False  # the speech guard ended its last talker sequence
    last_text: float = field(default_factory=time.monotonic)  # when its inbox last brought anything

    @property
    def max_frames(self) -> int | None:
        return self.stream.options.max_frames


L = TypeVar("L", bound=LiveStream)


class LiveStreams(Generic[L]):
    """A backend's streams: `submit` and the counts from any thread, the rest from the backend's
    loop. `record` is the backend's `LiveStream` subclass (its own fields all have defaults);
    `end_step` gives the step count each released stream's result carries."""

    def __init__(
        self,
        record: type[L],
        parts: ModelParts,
        sink: FrameSink,
        max_streams: int,
        segments: SegmentPolicy,
        end_step: Callable[[], int] = lambda: 0,
    ) -> None:
        self.record = record
        self.parts = parts
        self.sink = sink
        self.max_streams = max_streams
        self.segment_policy = segments
        self.end_step = end_step
        self.live: list[L] = []  # admitted and not released; the backend's loop only
        self._lock = threading.Lock()  # guards what other threads touch: the inbox, slots, error
        self._incoming: list[L] = []
        self._free = list(range(max_streams))  # a heap: the lowest slot first keeps batches narrow
        self._reserved = 0
        self._error: BaseException | None = None

    # --- any thread ----------------------------------------------------------------------------

    def submit(self, stream: Stream, options: GenerationOptions, lookahead: int) -> None:
        """Give a new stream a slot and queue it for admission. Raises EngineFull when every slot
        is taken, RuntimeError once the backend's loop has stopped."""
        segments = SegmentQueue([], self.parts.text_ids.tts_eos, self.segment_policy)
        seed = resolve_seed(stream.options.seed)
        with self._lock:
            if self._error is not None:
                raise RuntimeError("the talker backend or the decoder stopped") from self._error
            if self._reserved >= self.max_streams:
                raise EngineFull(f"all {self.max_streams} stream slots are in use")
            slot = heapq.heappop(self._free)
            self._reserved += 1
            self._incoming.append(self.record(stream, options, lookahead, segments, slot, seed))

    def stopped(self, error: BaseException) -> None:
        """The backend's loop or the decoder's ended on `error` (a bug, not a stream's fault):
        refuse new streams."""
        with self._lock:
            self._error = error

    @property
    def error(self) -> BaseException | None:
        with self._lock:
            return self._error

    @property
    def count(self) -> int:
        """Streams submitted and not yet released."""
        with self._lock:
            return self._reserved

    @property
    def used_slots(self) -> int:
        with self._lock:
            return self.max_streams - len(self._free)

    # --- the backend's loop --------------------------------------------------------------------

    def take_incoming(self) -> list[L]:
        """The streams submitted since the last call, to `admit` in order."""
        with self._lock:
            incoming, self._incoming = self._incoming, []
        return incoming

    def admit(self, live: L) -> bool:
        """Take a submitted stream in: its voice prompt built, the decoder told it opens. A voice
        that does not build fails the stream alone: it is released with the error (the backend
        holds nothing of it yet) and False is returned."""
        self.live.append(live)
        parts = self.parts
        try:
            live.voice = build_voice_prompt(
                parts.talker,
                parts.tokenizer,
                parts.text_ids,
                live.stream.voice,
                parts.variant,
                parts.model_size,
            )
        except Exception as exc:
            self.release(live, "error", self.failure(live, exc))
            return False
        live.segments.ref_ids = live.voice.ref_ids
        self.sink.open(live.stream, live.voice.ref_codes)
        return True

    def drain(self, live: L) -> bool:
        """Move the stream's new text and marks into its segments. True when it was cancelled or
        aborted: then nothing is moved, and the backend releases it (freeing what it holds first)."""
        items, cancel = live.stream.take_inbox()
        if cancel:
            return True
        if items:
            live.last_text = time.monotonic()
        for item in items:
            if item is Mark.FLUSH:
                live.segments.close(flushed=True)
            elif item is Mark.END:
                live.segments.close(flushed=False)
                live.ended = True
            else:
                live.segments.add(item)
        return False

    def failure(self, live: L, exc: BaseException) -> EngineError:
        """What a stream's failure tells its caller (an EngineError as raised, anything else as
        StreamFailed), logged; the backend then releases the stream with it."""
        error = exc if isinstance(exc, EngineError) else StreamFailed(f"{type(exc).__name__}: {exc}")
        log.warning("stream %d failed: %s", live.stream.id, error)
        return error

    def release(self, live: L, reason: str, error: EngineError | None = None) -> bool:
        """End a stream: the decoder told how (close for the CLOSED reasons, else drop), then its
        slot freed. False when it was released already. What the backend holds of the stream (KV,
        a request) is the backend's to free."""
        if live.released:
            return False
        live.released = True
        self.live.remove(live)
        if reason in CLOSED:
            self.sink.close(live.stream, reason, live.frames, self.end_step())
        else:
            self.sink.drop(live.stream, reason, live.frames, self.end_step(), error)
        with self._lock:
            heapq.heappush(self._free, live.slot)
            self._reserved -= 1
        return True
