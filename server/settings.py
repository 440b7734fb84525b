"""What a `start` message fixes for every context of a session: the voice, the engine stream
options and the output format, each checked against the loaded engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voicewire.engine import (
    ChunkSchedule,
    EngineError,
    InvalidOptions,
    SamplingParams,
    StreamOptions,
    Voice,
)
from voicewire.engine.api import EngineClient
from voicewire.server import protocol as p
from voicewire.server.auth import ANONYMOUS_CALLER, Caller
from voicewire.server.encoder import OutputFormat
from voicewire.server.errors import ProtocolError, from_engine
from voicewire.server.http_errors import HttpError
from voicewire.server.voices_api import VoiceLibrary


@dataclass(frozen=True)
class SessionSettings:
    voice: Voice
    options: StreamOptions
    format: OutputFormat


async def settings_from_start(
    message: p.Start,
    engine: EngineClient,
    library: VoiceLibrary | None = None,
    caller: Caller = ANONYMOUS_CALLER,
) -> SessionSettings:
    """Raises ProtocolError (invalid_format, invalid_voice, invalid_options). `start.voice.id` is
    looked up in `library` (None: this server has none) as `caller` sees it."""
    fmt = OutputFormat.from_spec(message.format)
    spec = message.voice
    if spec.id is not None:
        return SessionSettings(await _stored_voice(spec, library, caller), _options(message, engine), fmt)
    try:
        voice = await engine.voice(
            speaker=spec.speaker,
            language=spec.language,
            instruct=spec.instruct,
            speaker_embedding=spec.speaker_embedding,
        )
        options = _stream_options(message, engine)
    except EngineError as exc:
        raise from_engine(exc, None) from None
    return SessionSettings(voice, options, fmt)


async def _stored_voice(spec: p.VoiceSpec, library: VoiceLibrary | None, caller: Caller) -> Voice:
    """`start.voice.id`: a voice from the library, as the socket's caller sees it."""
    if spec.speaker is not None or spec.instruct is not None or spec.speaker_embedding is not None:
        raise ProtocolError(
            "invalid_voice", "voice.id names a whole voice: give no speaker, instruct or embedding"
        )
    if library is None:
        raise ProtocolError("invalid_voice", "this server has no voice library")
    try:
        return await library.resolve(spec.id or "", caller, spec.language)
    except HttpError as error:
        raise ProtocolError("invalid_voice", error.message) from None


def _options(message: p.Start, engine: EngineClient) -> StreamOptions:
    try:
        return _stream_options(message, engine)
    except EngineError as exc:
        raise from_engine(exc, None) from None


def _stream_options(message: p.Start, engine: EngineClient) -> StreamOptions:
    buffering = message.buffering
    chunks = None
    if buffering.first_chunk_frames is not None or buffering.chunk_frames is not None:
        default = engine.config.chunks
        chunks = ChunkSchedule(
            first_frames=buffering.first_chunk_frames or default.first_frames,
            frames=tuple(buffering.chunk_frames or default.frames),
        )
    return sampled_options(
        message.sampling,
        engine,
        layout=message.layout,
        max_frames=message.max_frames,
        suppress_eos=message.suppress_eos,
        lookahead_tokens=buffering.lookahead_tokens,
        chunks=chunks,
    )


def sampled_options(sampling: p.SamplingSpec, engine: EngineClient, **options: Any) -> StreamOptions:
    """StreamOptions sampling as `sampling` says (the socket's `start.sampling`, or the same fields
    of POST /v1/audio/speech), with the other `options`; unset sampling fields take the checkpoint's
    generation_config.json. Raises ProtocolError(invalid_options)."""
    talker = None
    if any(v is not None for v in (sampling.temperature, sampling.top_k, sampling.top_p)):
        defaults = engine.info.generation_config
        try:
            talker = SamplingParams(
                temperature=float(sampling.temperature or defaults.get("temperature", 0.9)),
                top_k=sampling.top_k if sampling.top_k is not None else defaults.get("top_k", 50),
                top_p=float(sampling.top_p or defaults.get("top_p", 1.0)),
            )
        except ValueError as exc:
            raise ProtocolError("invalid_options", str(exc)) from None
    penalty = sampling.repetition_penalty
    try:
        return StreamOptions(
            greedy=sampling.greedy,
            seed=sampling.seed,
            talker=talker,
            repetition_penalty=None if penalty is None else float(penalty),
            **options,
        )
    except InvalidOptions as exc:  # e.g. greedy with a seed
        raise ProtocolError("invalid_options", exc.message) from None
