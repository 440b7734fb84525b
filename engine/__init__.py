"""voicewire.engine: Qwen3-TTS in PyTorch, streamed: text in as it arrives, audio chunks out."""

from voicewire.engine.api import EngineClient
from voicewire.engine.config import ChunkSchedule, EngineConfig, StreamOptions
from voicewire.engine.errors import (
    EngineError,
    EngineFull,
    InvalidOptions,
    InvalidText,
    InvalidVoice,
    StreamClosed,
    StreamFailed,
)
from voicewire.engine.model.prompt import Voice
from voicewire.engine.model.sampling import SamplingParams
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.runtime.segments import SegmentPolicy
from voicewire.engine.runtime.stream import AudioChunk, StreamResult

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
