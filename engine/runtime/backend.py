"""The talker-backend contract: what the engine asks of whatever runs the talker and the code
predictor over its streams (`TalkerBackend`; it is built from a checkpoint's `ModelParts`) and where
it hands every stream's frames (`FrameSink`, the decoder stage). The `torch` backend
(engine/runtime/scheduler.py, this process's PyTorch) and the `vllm` backend (engine/vllm/scheduler.py) both
satisfy it; each owns its loop, which the engine runs in a thread of its own, and both keep their
streams in one `LiveStreams` table (engine/runtime/live_streams.py).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor

from voicewire.engine.config import EngineConfig, GenerationOptions
from voicewire.engine.errors import EngineError
from voicewire.engine.runtime.segments import TrackEntry
from voicewire.engine.runtime.stream import Stream

if TYPE_CHECKING:  # live_streams.py imports FrameSink from here
    from voicewire.engine.runtime.live_streams import LiveStreams


class PassFence:
    """What a talker that waits for a new stream's first chunk hands the decoder with that stream's
    first frames (`config.FirstChunkAlone`): the decoder opens it once it has queued the pass that
    decodes that chunk, with a CUDA event recorded after the pass (None on CPU, or when the frames
    made no chunk due), and the talker's next step waits for that event on the GPU."""

    def __init__(self, streams: list[int]) -> None:
        self.streams = frozenset(streams)  # the ids of the streams whose first chunk it waits for
        self._opened = threading.Event()
        self._event: torch.cuda.Event | None = None

    def open(self, event: torch.cuda.Event | None = None) -> None:
        """From the decoder's thread; only the first call counts."""
        if not self._opened.is_set():
            self._event = event
            self._opened.set()

    def wait(self, timeout: float) -> torch.cuda.Event | None:
        """The pass's event, or None if none came within `timeout` seconds (the talker goes on)."""
        return self._event if self._opened.wait(timeout) else None


class FrameSink(Protocol):
    """Where frames go, in order per stream: open, frames and segment ends, then close or drop.
    `fence`, with a step's frames: open it once the first chunk of its streams is queued."""

    def open(self, stream: Stream, warmup: Tensor | None) -> None: ...

    def frames(
        self, streams: list[Stream], codes: np.ndarray, fed: list[TrackEntry], fence: PassFence | None = None
    ) -> None: ...

    def segment_end(self, stream: Stream, flushed: bool) -> None: ...

    def drain(self, stream: Stream) -> None: ...  # no frames come for a while: send what is held

    def close(self, stream: Stream, reason: str, frames: int, end_step: int) -> None: ...

    def drop(
        self, stream: Stream, reason: str, frames: int, end_step: int, error: EngineError | None
    ) -> None: ...


class TalkerBackend(Protocol):
    config: EngineConfig  # replaced between rounds by `Engine.tune`
    # Its streams' table, read from any thread for the live count, the slots held and the error
    # that stopped the loop.
    streams: LiveStreams[Any]

    def submit(self, stream: Stream, options: GenerationOptions, lookahead: int) -> None:
        """Take a new stream (any thread); raises EngineFull when every slot is taken."""
        ...

    def wake(self) -> None:
        """A stream has news (text, a mark, a cancel, audio read): look at it soon (any thread)."""
        ...

    def run(self, stop: threading.Event) -> None:
        """The backend's loop, until `stop` is set; a bug ends it with `streams.error` set."""
        ...

    def wait_ready(self, timeout: float) -> None:
        """Block until the loop can take streams, or raise why it cannot."""
        ...
