"""The engine contract: what a server, a benchmark or your own program holds, whatever runs the
engine. `Engine` (engine/runtime/engine.py, the engine in this process) and `EngineProcess`
(engine/runtime/engine_process.py, the engine in a process of its own) both satisfy `EngineClient`, and both
hand out `StreamHandle`s (engine/runtime/handle.py). tests/engine/test_contract.py runs one suite on both.

Nothing here blocks an event loop: resolving a voice is awaited, and a stream's requests are
handed over without waiting on the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from voicewire.engine.config import EngineConfig, GenerationOptions, StreamOptions
from voicewire.engine.errors import InvalidOptions
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.voice import Voice

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


@dataclass(frozen=True)
class EngineInfo:
    """What callers may know of the loaded checkpoint, in plain values (it crosses processes)."""

    folder: str
    device: str
    variant: str  # custom_voice, voice_design or base
    model_size: str
    speakers: tuple[str, ...]
    speaker_dialects: dict[str, str | bool]
    languages: tuple[str, ...]
    generation_config: dict[str, Any]
    speaker_embedding_size: int  # the length of a Base checkpoint's x-vector
    random_weights: bool = False  # the built-in tiny checkpoint: it makes noise, not words


def generation_options(info: EngineInfo, options: StreamOptions) -> GenerationOptions:
    """A stream's sampling settings: the checkpoint's defaults with `options` over them."""
    try:
        return GenerationOptions.from_generation_config(
            info.generation_config,
            greedy=options.greedy,
            suppress_eos=options.suppress_eos,
            talker=options.talker,
            predictor=options.predictor,
            repetition_penalty=options.repetition_penalty,
        )
    except ValueError as exc:
        raise InvalidOptions(str(exc)) from exc


class EngineClient(Protocol):
    """An engine as its callers see it. Open streams and await voices in one running event loop."""

    info: EngineInfo  # the loaded checkpoint, in plain values
    config: EngineConfig

    @property
    def registry(self) -> CollectorRegistry | None:
        """The engine's Prometheus metrics when they live in this process (else the engine process
        serves them through the shared metrics folder)."""
        ...

    @property
    def healthy(self) -> bool:
        """The engine runs and can take streams."""
        ...

    @property
    def live_streams(self) -> int:
        """Streams holding a slot in the whole engine, whoever opened them."""
        ...

    @property
    def restarts(self) -> int:
        """Times the engine was started again after it died (a server warms it up again)."""
        ...

    async def voice(self, **fields: Any) -> Voice:
        """A voice that fits the loaded checkpoint, from request fields: `speaker`, `language`,
        `instruct`, `ref_audio` ((samples, rate)), `ref_text`, `speaker_embedding`. Computed voices
        are kept by content. Raises InvalidVoice."""
        ...

    async def check_voice(self, voice: Voice) -> None:
        """Raise InvalidVoice unless a voice made elsewhere fits the loaded checkpoint."""
        ...

    def open_stream(self, voice: Voice, options: StreamOptions | None = None) -> StreamHandle:
        """A new stream in the running event loop. Raises InvalidOptions, or EngineFull when the
        whole engine has no slot free."""
        ...

    def watch_slots(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a stream slot may have come free: a stream opened here
        finished, or (the engine process) the whole engine has room again. It is called in an
        engine thread and must not block. A hint, not a reservation: another caller may take the
        slot first (server/admission.py queues for slots with it)."""
        ...

    def close(self) -> None:
        """Release the engine (or the connection to it); open streams get no more audio."""
        ...
