"""The talker-backend contract's checks (engine/runtime/backend.py), one suite for both backends: each check
drives a running backend through `submit`, its streams and its counts, with a sink that records
what the backend hands on. tests/engine/runtime/test_backend_contract.py runs them on the torch backend in
this process and, through tests/vllm/backend_contract.py, on the vllm backend under vLLM's CPU build.

Every check starts and ends with no stream held, so one backend serves them all (vLLM takes a
while to start)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from torch import Tensor

from voicewire.engine.config import EngineConfig, GenerationOptions, StreamOptions
from voicewire.engine.errors import EngineError, EngineFull, StreamFailed
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.backend import PassFence, TalkerBackend
from voicewire.engine.runtime.segments import SegmentPolicy, TrackEntry
from voicewire.engine.runtime.stream import Stream
from voicewire.engine.voice import Voice

MAX_STREAMS = 3
KV_LENGTH = 128
TIMEOUT_S = 120.0  # vLLM's CPU build on two busy cores is slow, not stuck
TEXT = "The quick brown fox jumps over the lazy dog."
# All of it in one segment (SEGMENTS) and in the prompt (non_streaming): far more positions than
# KV_LENGTH holds.
TOO_LONG = "one two three four five six seven eight nine ten " * 20
SEGMENTS = SegmentPolicy(sentence_tokens=None, max_tokens=None)


@dataclass
class Heard:
    """One stream as the sink saw it."""

    opened: bool = False
    codes: list[np.ndarray] = field(default_factory=list)
    end: tuple[str, int, EngineError | None] | None = None  # reason, frames, error
    end_step: int | None = None


class Recorder:
    """A FrameSink that records each stream's frames and end; the backend's thread writes, the
    check's thread waits on it."""

    def __init__(self) -> None:
        self.heard: dict[int, Heard] = {}
        self._changed = threading.Condition()

    def _update(self, stream: Stream, change: Callable[[Heard], None]) -> None:
        with self._changed:
            change(self.heard.setdefault(stream.id, Heard()))
            self._changed.notify_all()

    def open(self, stream: Stream, warmup: Tensor | None) -> None:
        self._update(stream, lambda heard: setattr(heard, "opened", True))

    def frames(
        self, streams: list[Stream], codes: np.ndarray, fed: list[TrackEntry], fence: PassFence | None = None
    ) -> None:
        for stream, row in zip(streams, codes, strict=True):
            self._update(stream, lambda heard, row=row: heard.codes.append(np.array(row)))

    def segment_end(self, stream: Stream, flushed: bool) -> None:
        pass

    def drain(self, stream: Stream) -> None:
        pass

    def close(self, stream: Stream, reason: str, frames: int, end_step: int) -> None:
        self.drop(stream, reason, frames, end_step, None)

    def drop(
        self, stream: Stream, reason: str, frames: int, end_step: int, error: EngineError | None
    ) -> None:
        def end(heard: Heard) -> None:
            heard.end, heard.end_step = (reason, frames, error), end_step

        self._update(stream, end)

    def of(self, stream: Stream) -> Heard:
        with self._changed:
            return self.heard.setdefault(stream.id, Heard())

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        with self._changed:
            assert self._changed.wait_for(condition, TIMEOUT_S), f"timed out waiting for {what}"

    def ended(self, stream: Stream) -> tuple[str, int, EngineError | None]:
        heard = self.of(stream)
        self.wait(lambda: heard.end is not None, f"stream {stream.id} to end")
        assert heard.end is not None
        return heard.end


def config(model: Qwen3TTS, backend: str) -> EngineConfig:
    return EngineConfig(
        model=str(model.folder),
        backend=backend,
        max_streams=MAX_STREAMS,
        kv_length=KV_LENGTH,
        segments=SEGMENTS,
    )


@contextmanager
def running(backend: TalkerBackend) -> Iterator[TalkerBackend]:
    """`backend`'s loop in a thread of its own, as the engine runs it."""
    stop = threading.Event()
    thread = threading.Thread(target=backend.run, args=(stop,), daemon=True)
    thread.start()
    try:
        backend.wait_ready(600)
        yield backend
    finally:
        stop.set()
        backend.wake()
        thread.join(60)


_ids = itertools.count(1)


@dataclass
class Kit:
    """A running backend, the sink it feeds and the model its streams' voices come from."""

    backend: TalkerBackend
    sink: Recorder
    model: Qwen3TTS

    def submit(self, voice: Voice | None = None, **options: object) -> Stream:
        """A greedy stream (EOS suppressed) handed to the backend with no text yet."""
        stream = Stream(
            next(_ids),
            voice or self.model.voice(speaker="vivian", language="english"),
            StreamOptions(greedy=True, suppress_eos=True, **options),  # type: ignore[arg-type]
            self.model.tokenizer,
            self.backend.wake,
        )
        generation = GenerationOptions.from_generation_config(
            self.model.generation_config, greedy=True, suppress_eos=True
        )
        self.backend.submit(stream, generation, 3)
        return stream

    def speak(self, text: str, voice: Voice | None = None, **options: object) -> Stream:
        stream = self.submit(voice, **options)
        stream.push_text(text)
        stream.end()
        return stream

    def counts(self) -> tuple[int, int]:
        return self.backend.streams.count, self.backend.streams.used_slots

    def settle(self) -> None:
        """Every stream released: no stream or slot held, the loop still running."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.counts() != (0, 0):
            assert time.monotonic() < deadline, f"streams still held: {self.counts()}"
            time.sleep(0.01)
        assert self.backend.streams.error is None


def check_submit_refuses_a_stream_past_capacity(kit: Kit) -> None:
    waiting = [kit.submit() for _ in range(MAX_STREAMS)]
    assert kit.counts() == (MAX_STREAMS, MAX_STREAMS)  # counted at submit, before the loop sees them
    try:
        kit.submit()
    except EngineFull as exc:
        assert f"all {MAX_STREAMS} stream slots are in use" in str(exc)
    else:
        raise AssertionError("a stream past capacity was taken")
    assert kit.counts() == (MAX_STREAMS, MAX_STREAMS)  # the refused one holds nothing
    for stream in waiting:
        stream.cancel()
    assert [kit.sink.ended(stream)[0] for stream in waiting] == ["cancelled"] * MAX_STREAMS
    kit.settle()
    again = [kit.submit() for _ in range(MAX_STREAMS)]  # every slot came back
    for stream in again:
        stream.cancel()
        kit.sink.ended(stream)
    kit.settle()


def check_counts_follow_a_stream_through_its_life(kit: Kit) -> None:
    assert kit.counts() == (0, 0)
    stream = kit.submit(max_frames=12)
    assert kit.counts() == (1, 1)
    heard = kit.sink.of(stream)
    kit.sink.wait(lambda: heard.opened, "the stream to open")
    assert kit.counts() == (1, 1) and not heard.codes  # admitted; no text, so no frame
    stream.push_text(TEXT)
    stream.end()
    reason, frames, error = kit.sink.ended(stream)
    assert (reason, frames, error) == ("max_frames", 12, None) and len(heard.codes) == 12
    kit.settle()


def check_cancel_releases_the_slot(kit: Kit) -> None:
    speaking = kit.speak(TEXT * 4, max_frames=2000)
    heard = kit.sink.of(speaking)
    kit.sink.wait(lambda: len(heard.codes) >= 3, "frames before the cancel")
    speaking.cancel()
    reason, frames, error = kit.sink.ended(speaking)
    assert reason == "cancelled" and error is None and 3 <= frames < 2000
    kit.settle()
    # Its slot serves a new stream, which speaks to its end.
    after = kit.speak(TEXT, max_frames=8)
    assert kit.sink.ended(after) == ("max_frames", 8, None)
    kit.settle()


def check_a_failing_stream_leaves_the_others_alone(kit: Kit) -> None:
    good = kit.speak(TEXT, max_frames=12)
    unknown = kit.speak(TEXT, Voice(speaker="nobody", language="english"), max_frames=12)
    too_long = kit.speak(TOO_LONG, layout="non_streaming", max_frames=12)
    for failed, why in ((unknown, "nobody"), (too_long, "prompt needs")):
        reason, frames, error = kit.sink.ended(failed)
        assert reason == "error" and frames == 0, (reason, frames)
        assert isinstance(error, StreamFailed) and why in str(error), error
    assert kit.sink.ended(good) == ("max_frames", 12, None)
    kit.settle()
    alone = kit.speak(TEXT, max_frames=12)
    assert kit.sink.ended(alone) == ("max_frames", 12, None)
    # The same codes as beside the failures: they took nothing from it.
    np.testing.assert_array_equal(np.stack(kit.sink.of(good).codes), np.stack(kit.sink.of(alone).codes))
    kit.settle()


CHECKS: dict[str, Callable[[Kit], None]] = {
    check.__name__.removeprefix("check_"): check
    for check in (
        check_submit_refuses_a_stream_past_capacity,
        check_counts_follow_a_stream_through_its_life,
        check_cancel_releases_the_slot,
        check_a_failing_stream_leaves_the_others_alone,
    )
}
