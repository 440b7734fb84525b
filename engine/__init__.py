"""voicewire.engine: Qwen3-TTS in PyTorch, streamed: text in as it arrives, audio chunks out.

The contract's names load without PyTorch: a server's worker processes import them to talk to the
engine process. `Engine`, the engine in this process, loads PyTorch when it is first named.
"""

from typing import TYPE_CHECKING, Any

from voicewire.engine.api import EngineClient
from voicewire.engine.config import ChunkSchedule, EngineConfig, SamplingParams, StreamOptions
from voicewire.engine.errors import (
    EngineError,
    EngineFull,
    InvalidOptions,
    InvalidText,
    InvalidVoice,
    StreamClosed,
    StreamFailed,
)
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.runtime.segments import SegmentPolicy
from voicewire.engine.runtime.stream import AudioChunk, StreamResult
from voicewire.engine.voice import Voice

if TYPE_CHECKING:
    from voicewire.engine.runtime.engine import Engine


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from voicewire.engine.runtime.engine import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AudioChunk",
    "ChunkSchedule",
    "Engine",
    "EngineClient",
    "EngineConfig",
    "EngineError",
    "EngineFull",
    "InvalidOptions",
    "InvalidText",
    "InvalidVoice",
    "SamplingParams",
    "SegmentPolicy",
    "StreamClosed",
    "StreamFailed",
    "StreamHandle",
    "StreamOptions",
    "StreamResult",
    "Voice",
]
