"""Protocol v1: every wire message, defined once as a typed model (docs/protocol.md documents them).

Client messages are validated strictly: unknown fields, missing fields and wrong types are errors.
Both codecs (msgpack and JSON) carry the same messages; only audio bytes differ (raw vs base64).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter

PROTOCOL_VERSION = 1
ContextId = Annotated[StrictStr, Field(min_length=1, max_length=64)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- client -> server ---------------------------------------------------------------------------


class VoiceSpec(_Message):
    speaker: StrictStr | None = None  # CustomVoice
    language: StrictStr = "auto"
    instruct: Annotated[StrictStr, Field(max_length=2000)] | None = None  # VoiceDesign, CustomVoice 1.7B
    speaker_embedding: list[StrictFloat | StrictInt] | None = None  # Base: an x-vector
    id: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None  # Base: a stored voice


class FormatSpec(_Message):
    encoding: Literal["opus", "mp3", "pcm_s16le", "pcm_f32le", "mulaw", "alaw"] = "opus"
    sample_rate: StrictInt = 48000  # per encoding: encoder.RATES
    bitrate: Annotated[StrictInt, Field(ge=6000, le=510000)] = 32000  # opus; mp3 (encoder.MP3_BITRATES)
    complexity: Annotated[StrictInt, Field(ge=0, le=10)] = 5  # opus only


class SamplingSpec(_Message):
    greedy: StrictBool = False
    seed: StrictInt | None = None
    temperature: Annotated[StrictFloat | StrictInt, Field(gt=0, le=5)] | None = None
    top_k: Annotated[StrictInt, Field(ge=0, le=4096)] | None = None
    top_p: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1)] | None = None
    repetition_penalty: Annotated[StrictFloat | StrictInt, Field(gt=0, le=5)] | None = None


class BufferingSpec(_Message):
    lookahead_tokens: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    first_chunk_frames: Annotated[StrictInt, Field(ge=1, le=32)] | None = None
    chunk_frames: (
        Annotated[list[Annotated[StrictInt, Field(ge=1, le=32)]], Field(min_length=1, max_length=8)] | None
    ) = None


class Start(_Message):
    type: Literal["start"]
    voice: VoiceSpec = VoiceSpec()
    format: FormatSpec = FormatSpec()
    sampling: SamplingSpec = SamplingSpec()
    buffering: BufferingSpec = BufferingSpec()
    layout: Literal["dual_track", "non_streaming"] = "dual_track"
    max_frames: Annotated[StrictInt, Field(ge=1)] | None = None
    suppress_eos: StrictBool = False  # benchmarks: ignore the model's end of speech (run to max_frames)
    timestamps: Literal["words"] | None = None  # "words": send `words` messages (docs/protocol.md)


class Text(_Message):
    type: Literal["text"]
    context_id: ContextId
    text: StrictStr
    flush: StrictBool = False
    # The context's speaking rate, time-stretched with the pitch kept (server/tempo.py), as
    # POST /v1/audio/speech's. Set by the text that opens the context; a later one repeats it or
    # leaves it out. None: 1, or the context's.
    speed: Annotated[StrictFloat, Field(ge=0.25, le=4.0)] | None = None


class Flush(_Message):
    type: Literal["flush"]
    context_id: ContextId


class End(_Message):
    type: Literal["end"]
    context_id: ContextId


class Cancel(_Message):
    type: Literal["cancel"]
    context_id: ContextId


class Playback(_Message):
    type: Literal["playback"]
    context_id: ContextId
    played_samples: Annotated[StrictInt, Field(ge=0)]
    underruns: Annotated[StrictInt, Field(ge=0)] = 0


class Ping(_Message):
    type: Literal["ping"]
    id: StrictStr | StrictInt | None = None


ClientMessage = Annotated[Start | Text | Flush | End | Cancel | Playback | Ping, Field(discriminator="type")]
CLIENT_TYPES = ("start", "text", "flush", "end", "cancel", "playback", "ping")
client_message: TypeAdapter[Any] = TypeAdapter(ClientMessage)


# --- server -> client ---------------------------------------------------------------------------


class Ready(_Message):
    type: Literal["ready"] = "ready"
    protocol: int = PROTOCOL_VERSION
    session_id: str
    encoding: str
    sample_rate: int
    packet_samples: int  # opus: samples per packet; pcm/mulaw: 0 (chunks vary)
    codec_delay: int  # opus, mp3: decoded samples to skip before the first real one (pre-skip); else 0
    max_contexts: int


class Audio(_Message):
    type: Literal["audio"] = "audio"
    context_id: str
    seq: int  # per context, from 0
    pts: int  # first sample's position in the context, in output samples
    samples: int  # valid samples in this packet (a final opus packet is padded past them)
    data: bytes
    final: bool = False


class Progress(_Message):
    type: Literal["progress"] = "progress"
    context_id: str
    text: str  # text that entered the talker since the last progress message
    text_end: int  # characters of the context's text consumed so far
    pts: int  # output samples generated when it did


class WordTiming(_Message):
    text: str
    start_char: int  # span in all text the client sent for the context, in characters
    end_char: int
    start: int  # output samples (pts units), approximate: see "Word timing" in docs/protocol.md
    end: int  # the next word's start; the context's last sample for its last word


class Words(_Message):
    type: Literal["words"] = "words"
    context_id: str
    words: list[WordTiming]  # in order; each starts within the audio sent before this message


class Flushed(_Message):
    type: Literal["flushed"] = "flushed"
    context_id: str
    pts: int


class Done(_Message):
    type: Literal["done"] = "done"
    context_id: str
    reason: str  # "end" or "max_frames"
    samples: int  # output samples sent
    seconds: float


class Cancelled(_Message):
    type: Literal["cancelled"] = "cancelled"
    context_id: str
    samples_generated: int  # output samples the engine made for the context
    samples_dropped: int  # of those, not sent
    heard_samples: int  # the last played_samples the client reported (at most those sent), else those sent
    heard_text: str | None = None  # word timing on: the text through the last word begun before heard_samples


class Error(_Message):
    type: Literal["error"] = "error"
    code: str
    message: str
    context_id: str | None = None
    fatal: bool = False


class Pong(_Message):
    type: Literal["pong"] = "pong"
    id: str | int | None = None


class ChunkSent(_Message):
    """Never on the wire: all of one engine chunk's messages (its audio, progress and words) are out,
    for a dialect that sends a chunk's audio and words together (one whose `chunk_sent` is set; the
    session emits none for v1's Codec)."""

    type: Literal["chunk_sent"] = "chunk_sent"
    context_id: str


ServerMessage = Ready | Audio | Progress | Words | Flushed | Done | Cancelled | Error | Pong | ChunkSent
