"""The talker-backend contract: what the engine asks of whatever runs the talker and the code
predictor over its streams. The `torch` backend (engine/scheduler.py, this process's PyTorch) and
the `vllm` backend (engine/vllm/scheduler.py) both satisfy it; each owns its loop, which the engine
runs in a thread of its own, and hands every stream's frames to the decoder stage.
"""

from __future__ import annotations

import threading
from typing import Protocol

from voicewire.engine.config import EngineConfig
from voicewire.engine.frame_step import GenerationOptions
from voicewire.engine.stream import Stream


class TalkerBackend(Protocol):
    config: EngineConfig  # replaced between rounds by `Engine.tune`

    def submit(self, stream: Stream, options: GenerationOptions, lookahead: int) -> None:
        """Take a new stream (any thread); raises EngineFull when every slot is taken."""
        ...

    def wake(self) -> None:
        """A stream has news (text, a mark, a cancel, audio read): look at it soon (any thread)."""
        ...

    def run(self, stop: threading.Event) -> None:
        """The backend's loop, until `stop` is set; a bug ends it with `error` set."""
        ...

    def wait_ready(self, timeout: float) -> None:
        """Block until the loop can take streams, or raise why it cannot."""
        ...

    @property
    def error(self) -> BaseException | None:
        """What stopped the loop, if it stopped unasked."""
        ...

    @property
    def live_streams(self) -> int:
        """Streams submitted and not yet released."""
        ...

    @property
    def used_slots(self) -> int:
        """Slots held, including those of streams being released."""
        ...
