"""voicewire.engine: Qwen3-TTS in PyTorch, streamed: text in as it arrives, audio chunks out."""

from voicewire.engine.config import ChunkSchedule, EngineConfig, StreamOptions
from voicewire.engine.engine import Engine
from voicewire.engine.errors import (
    EngineError,
    EngineFull,
    InvalidOptions,
    InvalidVoice,
    StreamClosed,
    StreamFailed,
)
from voicewire.engine.prompt import Voice
from voicewire.engine.sampling import SamplingParams
from voicewire.engine.segments import SegmentPolicy
from voicewire.engine.stream import AudioChunk, Stream, StreamResult

__all__ = [
    "AudioChunk",
    "ChunkSchedule",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineFull",
    "InvalidOptions",
    "InvalidVoice",
    "SamplingParams",
    "SegmentPolicy",
    "Stream",
    "StreamClosed",
    "StreamFailed",
    "StreamOptions",
    "StreamResult",
    "Voice",
]
