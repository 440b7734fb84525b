"""voicewire.engine: Qwen3-TTS in PyTorch, streamed: text in as it arrives, audio chunks out."""

from voicewire.engine.api import EngineClient
from voicewire.engine.config import ChunkSchedule, EngineConfig, StreamOptions
from voicewire.engine.engine import Engine
from voicewire.engine.errors import (
    EngineError,
    EngineFull,
    InvalidOptions,
    InvalidText,
    InvalidVoice,
    StreamClosed,
    StreamFailed,
)
from voicewire.engine.handle import StreamHandle
from voicewire.engine.prompt import Voice
from voicewire.engine.sampling import SamplingParams
from voicewire.engine.segments import SegmentPolicy
from voicewire.engine.stream import AudioChunk, StreamResult

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
