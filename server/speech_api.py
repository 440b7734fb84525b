"""HTTP: `POST /v1/audio/speech` (OpenAI-compatible) and `GET /v1/voices`.

`voice` names a CustomVoice speaker, or on Base checkpoints a stored voice's id (voices_api.py);
a Base checkpoint also takes a one-off reference (`ref_audio`, base64, with an optional `ref_text`).
Every client mistake is a 4xx with a stable code (http_errors.py).

The speech endpoint takes the whole text at once and answers with 24 kHz 16-bit mono audio (at
`speed` other than 1, time-stretched with the pitch kept: `tempo.py`), as
`pcm` (raw) or `wav`, either streamed as it is generated (`stream: true`; the WAV header then
declares an unknown length) or in one body. `stream_format: "sse"` streams the same bytes as
OpenAI's `speech.audio.delta` events instead, then `speech.audio.done` (speech_events.py).
Sampling takes the socket's options (`greedy`, `seed`, `temperature`, `top_k`, `top_p`,
`repetition_penalty`), checked as the socket checks them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from voicewire.engine import EngineError, EngineFull, Voice
from voicewire.engine.api import EngineClient
from voicewire.engine.model.text_tokenizer import cached_tokenizer
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.runtime.stream import SAMPLE_RATE, AudioChunk
from voicewire.server import protocol as p
from voicewire.server.admission import Admission
from voicewire.server.auth import Caller
from voicewire.server.errors import ProtocolError
from voicewire.server.http_errors import HttpError, error_response
from voicewire.server.metrics import Metrics
from voicewire.server.settings import sampled_options
from voicewire.server.speech_events import (
    HEADERS,
    MEDIA_TYPE,
    SpeechAudioDelta,
    SpeechAudioDone,
    SpeechError,
    SpeechUsage,
    frame,
)
from voicewire.server.tempo import TimeStretch
from voicewire.server.voices_api import (
    JSON_OVERHEAD,
    VoiceLibrary,
    decode_base64_audio,
    decode_reference,
    read_body,
)

UNKNOWN_LENGTH = 0xFFFFFFFF  # a streamed WAV's sizes, which readers take as "to the end"
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm"}
MAX_INPUT_CHARS = 20000


class SpeechRequest(p.SamplingSpec):
    """The body. Its sampling fields (greedy, seed, temperature, top_k, top_p,
    repetition_penalty) are the socket's `start.sampling`, flat, with the same bounds: one
    definition (protocol.SamplingSpec) and one check (settings.sampled_options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Annotated[StrictStr, Field(min_length=1, max_length=MAX_INPUT_CHARS)]
    model: StrictStr | None = None  # accepted for compatibility; the server has one model
    voice: StrictStr | None = None  # a speaker name (CustomVoice) or a stored voice's id (Base)
    ref_audio: StrictStr | None = None  # Base: base64 reference audio, cloned for this request
    ref_text: StrictStr | None = None  # with ref_audio: its transcript (in-context cloning)
    instructions: Annotated[StrictStr, Field(max_length=2000)] | None = None
    language: StrictStr = "auto"
    response_format: StrictStr = "wav"
    speed: Annotated[StrictFloat | StrictInt, Field(ge=0.25, le=4.0)] = 1.0
    stream: StrictBool = False
    stream_format: Literal["audio", "sse"] = "audio"  # sse: always streamed, whatever `stream` says

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_object(cls, value: object) -> object:
        # OpenAI's SDK names a custom voice as {"id": "voice_..."}: here, the same as its id.
        if isinstance(value, dict) and set(value) == {"id"}:
            return value["id"]
        return value


def _error(status: int, message: str, code: str) -> JSONResponse:
    return error_response(status, message, code)


# A stream that fails for one of these failed on the request's account: 4xx, not 500.
CLIENT_CODES = {"invalid_voice": 400, "invalid_options": 400, "invalid_text": 400, "engine_full": 503}


def wav_header(samples: int | None) -> bytes:
    """A 44-byte header for 16-bit mono PCM at 24 kHz; None: length unknown (streaming)."""
    data = UNKNOWN_LENGTH if samples is None else samples * 2
    riff = UNKNOWN_LENGTH if samples is None else 36 + data
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        SAMPLE_RATE,
        SAMPLE_RATE * 2,
        2,
        16,
        b"data",
        data,
    )


def _pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def _at_speed(pcm: np.ndarray, final: bool, tempo: TimeStretch | None) -> np.ndarray:
    return pcm if tempo is None else tempo.process(pcm, final=final)


def _count_tokens(folder: str, texts: list[str]) -> int:
    tokenizer = cached_tokenizer(folder)
    return sum(len(tokenizer.encode(text)) for text in texts)


async def _after(first: AudioChunk, rest: AsyncIterator[AudioChunk]) -> AsyncIterator[AudioChunk]:
    yield first
    async for chunk in rest:
        yield chunk


def speech_endpoints(engine: EngineClient, metrics: Metrics, library: VoiceLibrary):
    # The largest body: a one-off ref_audio at the upload limit, in base64, and the text.
    body_limit = (library.limits.max_upload_bytes + 2) // 3 * 4 + 4 * MAX_INPUT_CHARS + JSON_OVERHEAD

    async def speech(request: Request, caller: Caller) -> Response:
        try:
            body = SpeechRequest.model_validate_json(await read_body(request, body_limit))
        except HttpError as error:
            metrics.http_requests.labels(str(error.status)).inc()
            return error.response()
        except ValidationError as exc:
            metrics.http_requests.labels("400").inc()
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return _error(400, f"{where}: {first['msg']}", "invalid_request")
        try:
            admission = Admission(engine, request.app.state.config, metrics)
            response = await _speak(body, caller, admission)
        except HttpError as error:
            response = error.response()
        metrics.http_requests.labels(str(response.status_code)).inc()
        return response

    async def _voice(body: SpeechRequest, caller: Caller) -> Voice:
        info = engine.info
        if info.variant != "base":
            if body.ref_audio is not None or body.ref_text is not None:
                raise HttpError(
                    400,
                    "invalid_voice",
                    f"ref_audio clones a voice: a Base checkpoint's; this one is {info.variant}",
                )
            # VoiceDesign ignores `voice`, which OpenAI clients always send.
            fields: dict = {"language": body.language, "instruct": body.instructions}
            if info.variant == "custom_voice":
                fields["speaker"] = body.voice or info.speakers[0]
            try:
                return await engine.voice(**fields)
            except EngineError as exc:
                raise HttpError(400, "invalid_voice", exc.message) from None
        if body.instructions is not None:
            raise HttpError(400, "invalid_voice", "instructions are not supported by Base checkpoints")
        if body.ref_audio is not None:
            if body.voice is not None:
                raise HttpError(400, "invalid_voice", "give a stored voice or ref_audio, not both")
            ref_text = library.check_ref_text(body.ref_text)
            data = decode_base64_audio(body.ref_audio, library.limits)
            if len(data) > library.limits.max_upload_bytes:
                raise HttpError(
                    413, "upload_too_large", f"ref_audio is over {library.limits.max_upload_bytes} bytes"
                )
            reference = await asyncio.to_thread(decode_reference, data, library.limits)
            return await library.clone(reference, ref_text, body.language)
        if body.ref_text is not None:
            raise HttpError(400, "invalid_voice", "ref_text needs ref_audio")
        if body.voice is None:
            raise HttpError(
                400,
                "invalid_voice",
                "this Base checkpoint clones voices: give a stored voice's id (POST /v1/voices) or ref_audio",
            )
        return await library.resolve(body.voice, caller, body.language)

    async def _speak(body: SpeechRequest, caller: Caller, admission: Admission) -> Response:
        if body.response_format not in MEDIA_TYPES:
            return _error(
                400,
                f"response_format {body.response_format!r} is not supported; use wav or pcm",
                "unsupported_format",
            )
        try:
            options = sampled_options(body, engine)
        except ProtocolError as error:
            return _error(400, error.message, error.code)
        voice = await _voice(body, caller)
        try:
            # Waits in line for a slot when none is free (server/admission.py).
            stream = await admission.open_stream(voice, options)
        except EngineFull as exc:
            return _error(503, exc.message, exc.code)  # with Retry-After (http_errors.py)
        except EngineError as exc:
            return _error(400, exc.message, exc.code)
        stream.push_text(body.input)
        stream.end()
        tempo = TimeStretch(float(body.speed)) if body.speed != 1.0 else None
        if body.stream_format == "sse":
            return await _sse(body, stream, tempo)
        if body.stream:
            return StreamingResponse(
                _chunks(stream, body.response_format, tempo), media_type=MEDIA_TYPES[body.response_format]
            )
        try:
            pcm = b"".join([_pcm16(_at_speed(chunk.pcm, chunk.final, tempo)) async for chunk in stream])
        except EngineError as exc:  # the voice, checked when the stream starts, or the engine
            return _error(CLIENT_CODES.get(exc.code, 500), exc.message, exc.code)
        header = wav_header(len(pcm) // 2) if body.response_format == "wav" else b""
        return Response(header + pcm, media_type=MEDIA_TYPES[body.response_format])

    async def _chunks(
        stream: StreamHandle,
        response_format: str,
        tempo: TimeStretch | None,
        chunks: AsyncIterator[AudioChunk] | None = None,
    ) -> AsyncIterator[bytes]:
        """The response's bytes as they are made, from `chunks` (default: the stream's); a WAV
        header rides on the first audio."""
        pending = wav_header(None) if response_format == "wav" else b""
        try:
            async for chunk in chunks or stream:
                data = pending + _pcm16(_at_speed(chunk.pcm, chunk.final, tempo))
                if data:
                    yield data
                    pending = b""
            if pending:
                yield pending
        finally:
            if stream.result is None:  # the client went away: stop generating
                stream.cancel()

    async def _sse(body: SpeechRequest, stream: StreamHandle, tempo: TimeStretch | None) -> Response:
        # The first chunk is awaited before the 200 goes out, so that a voice the engine refuses
        # as the stream starts is a 4xx here too; a later failure can only end the event stream.
        try:
            first = await anext(stream)
        except EngineError as exc:
            return _error(CLIENT_CODES.get(exc.code, 500), exc.message, exc.code)
        except BaseException:  # cancelled while waiting (the server stops): stop generating
            stream.cancel()
            raise
        return StreamingResponse(_events(body, stream, first, tempo), media_type=MEDIA_TYPE, headers=HEADERS)

    async def _events(
        body: SpeechRequest, stream: StreamHandle, first: AudioChunk, tempo: TimeStretch | None
    ) -> AsyncIterator[bytes]:
        # Counted while the audio streams: the first request loads the tokenizer (about a second).
        texts = [body.input] if body.instructions is None else [body.input, body.instructions]
        counting = asyncio.ensure_future(asyncio.to_thread(_count_tokens, engine.info.folder, texts))
        try:
            async for data in _chunks(stream, body.response_format, tempo, _after(first, stream)):
                yield frame(SpeechAudioDelta.of(data))
            assert stream.result is not None  # the stream ran out: it has finished
            frames = stream.result.frames
            input_tokens = await counting
            usage = SpeechUsage(
                input_tokens=input_tokens, output_tokens=frames, total_tokens=input_tokens + frames
            )
            yield frame(SpeechAudioDone(usage=usage))
        except EngineError as exc:
            yield frame(SpeechError.of(CLIENT_CODES.get(exc.code, 500), exc.code, exc.message))
        finally:
            counting.cancel()
            if stream.result is None:  # the client went away: stop generating
                stream.cancel()

    async def voices(request: Request, caller: Caller) -> JSONResponse:
        info = engine.info
        speakers = [
            {"id": name, "dialect": info.speaker_dialects.get(name) or None} for name in info.speakers
        ]
        return JSONResponse(
            {
                "variant": info.variant,
                "voices": speakers,
                "stored": await library.list(caller),
                "languages": list(info.languages),
                "instructions": info.variant == "voice_design" or info.model_size == "1b7",
                "cloning": info.variant == "base",
            }
        )

    return speech, voices
