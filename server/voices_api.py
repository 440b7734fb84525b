"""The voice library over HTTP: `POST /v1/voices` clones a voice from reference audio once,
`GET /v1/voices` lists the checkpoint's speakers and the stored voices it can speak,
`GET /v1/voices/{id}` and `DELETE /v1/voices/{id}`; and `VoiceLibrary.resolve`, which turns a
stored id into an engine `Voice` for the socket and `POST /v1/audio/speech`.

Uploads come as JSON with base64 `audio`, or as the audio file itself for a body (fields in the
query string); bodies are read as they arrive and refused as soon as they pass the size limit.
Decoding and resampling run in a worker thread, the x-vector in the engine (off the event loop),
and the database calls in worker threads too (`voice_store.py`).

With API keys, a voice belongs to the key that made it (browser tokens act for their key): other
keys get 404 for it. With none, voices are shared.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import soundfile as sf
import soxr
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voicewire.engine import EngineError, Voice
from voicewire.engine.api import EngineClient
from voicewire.engine.runtime.stream import SAMPLE_RATE
from voicewire.server.auth import Caller
from voicewire.server.config import VoiceLimits
from voicewire.server.http_errors import HttpError
from voicewire.server.metrics import Metrics
from voicewire.server.voice_store import (
    StoredVoice,
    TooManyVoices,
    VoiceStore,
    new_voice_id,
    owner_hash,
)

SILENCE_PEAK = 10 ** (-60 / 20)  # a reference whose loudest sample is under -60 dBFS is silence
JSON_OVERHEAD = 65536  # a JSON upload's fields besides its base64 audio


def checkpoint_family(info: Any) -> str:
    """Which checkpoints can speak a voice: the x-vector comes from the size's speaker encoder."""
    return f"qwen3-tts-12hz-{info.model_size or 'unknown'}"


class UploadFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[StrictStr, Field(min_length=1, max_length=100)]
    ref_text: StrictStr | None = None  # its limit is checked apart, for its own error code
    language: StrictStr = "auto"
    description: Annotated[StrictStr, Field(max_length=1000)] = ""


class JsonUpload(UploadFields):
    audio: StrictStr  # base64 of a WAV, FLAC or OGG file


@dataclass(frozen=True)
class Reference:
    samples: np.ndarray  # [n] float32, mono, 24 kHz
    duration: float  # seconds, as uploaded

    def content_hash(self, ref_text: str | None) -> str:
        digest = hashlib.sha256(self.samples.tobytes())
        digest.update((ref_text or "").encode())
        return digest.hexdigest()


def decode_reference(data: bytes, limits: VoiceLimits) -> Reference:
    """An uploaded file -> mono 24 kHz float32, checked; raises HttpError. Blocks: run in a thread."""
    if not data:
        raise HttpError(400, "empty_audio", "the reference audio is empty")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate, frames = f.samplerate, f.frames
            if frames > 0 and frames / rate > limits.max_seconds:  # before decoding it all
                raise _too_long(frames / rate, limits)
            audio = f.read(dtype="float32", always_2d=True)
    except (sf.SoundFileError, RuntimeError, TypeError, ValueError) as exc:
        raise HttpError(
            400, "invalid_audio", f"the reference is not audio this server can decode (WAV, FLAC, OGG): {exc}"
        ) from None
    if audio.shape[0] == 0:
        raise HttpError(400, "empty_audio", "the reference audio holds no samples")
    duration = audio.shape[0] / rate
    if duration > limits.max_seconds:
        raise _too_long(duration, limits)
    if duration < limits.min_seconds:
        raise HttpError(
            400,
            "audio_too_short",
            f"the reference is {duration:.2f} s long; at least {limits.min_seconds:g} s is needed",
        )
    mono = audio.mean(axis=1, dtype=np.float32)  # as the official code downmixes
    if not np.isfinite(mono).all() or float(np.abs(mono).max()) < SILENCE_PEAK:
        raise HttpError(400, "silent_audio", "the reference audio is silent (no sample above -60 dBFS)")
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return Reference(np.ascontiguousarray(mono), duration)


def _too_long(seconds: float, limits: VoiceLimits) -> HttpError:
    return HttpError(
        400, "audio_too_long", f"the reference is {seconds:.1f} s long; at most {limits.max_seconds:g} s"
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read as it arrives; refused (413) once it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> HttpError:
    return HttpError(413, "upload_too_large", f"the upload is larger than {limit} bytes")


def decode_base64_audio(text: str, limits: VoiceLimits) -> bytes:
    if len(text) > (limits.max_upload_bytes + 2) // 3 * 4:
        raise _too_large(limits.max_upload_bytes)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(400, "invalid_audio", "audio is not valid base64") from None


class VoiceLibrary:
    def __init__(
        self, engine: EngineClient, folder: Path, limits: VoiceLimits, metrics: Metrics, shared: bool
    ) -> None:
        """Voices in `folder` (server.data_dir) within `limits` (server.voices). `shared`: no API
        keys, so every caller sees every voice."""
        self.engine, self.limits, self.metrics, self.shared = engine, limits, metrics, shared
        self.store = VoiceStore(folder)  # opened on first use: other variants never touch it

    def _owner(self, caller: Caller) -> str | None:
        """The owner to filter on; None: all (no keys)."""
        return None if self.shared else owner_hash(caller.identity)

    # --- use by id ------------------------------------------------------------------------------

    async def resolve(self, voice_id: str, caller: Caller, language: str = "auto") -> Voice:
        """The engine voice for a stored id; raises HttpError(400, invalid_voice) when it is not
        there for this caller or does not fit the loaded checkpoint. `language` other than auto
        overrides the stored one."""
        info = self.engine.info
        if info.variant != "base":
            raise HttpError(
                400,
                "invalid_voice",
                f"stored voices are cloned voices, spoken by Base checkpoints; this one is {info.variant}",
            )
        stored = await asyncio.to_thread(self.store.get, voice_id, self._owner(caller))
        if stored is None:
            raise HttpError(400, "invalid_voice", f"no voice {voice_id!r}")
        family = checkpoint_family(info)
        if stored.family != family or stored.hidden_size != info.speaker_embedding_size:
            raise HttpError(
                400,
                "invalid_voice",
                f"voice {voice_id!r} was made with a {stored.family} checkpoint (hidden size "
                f"{stored.hidden_size}); this one is {family} (hidden size {info.speaker_embedding_size})",
            )
        voice = Voice(
            language=language if language != "auto" else stored.language,
            xvector=stored.xvector,
            ref_codes=stored.ref_codes,  # Voice takes them as int64
            ref_text=stored.ref_text,
        )
        try:
            await self.engine.check_voice(voice)
        except EngineError as exc:
            raise HttpError(400, "invalid_voice", exc.message) from None
        return voice

    async def clone(self, reference: Reference, ref_text: str | None, language: str) -> Voice:
        """The engine's voice for reference audio (the x-vector, and codes with ref_text), timed."""
        started = time.perf_counter()
        try:
            voice = await self.engine.voice(
                ref_audio=(reference.samples, SAMPLE_RATE), ref_text=ref_text, language=language
            )
        except EngineError as exc:
            raise HttpError(400, "invalid_voice", exc.message) from None
        self.metrics.voice_compute.observe(time.perf_counter() - started)
        return voice

    def check_ref_text(self, ref_text: str | None) -> str | None:
        if ref_text is not None and len(ref_text) > self.limits.max_ref_text_chars:
            raise HttpError(
                400,
                "ref_text_too_long",
                f"ref_text has {len(ref_text)} characters; at most {self.limits.max_ref_text_chars}",
            )
        return ref_text or None

    # --- endpoints ------------------------------------------------------------------------------

    async def create(self, request: Request, caller: Caller) -> Response:
        try:
            stored = await self._create(request, caller)
        except HttpError as error:
            self.metrics.voice_upload_failures.labels(error.code).inc()
            return error.response()
        self.metrics.voice_uploads.inc()
        body = {"id": stored.id, "name": stored.name, "duration": round(stored.duration, 3)}
        return JSONResponse(body | {"in_context": stored.in_context}, status_code=201)

    async def _create(self, request: Request, caller: Caller) -> StoredVoice:
        info = self.engine.info
        if info.variant != "base":
            raise HttpError(
                400,
                "cloning_unsupported",
                f"cloning needs a Base checkpoint; this one is {info.variant}",
            )
        fields, data = await self._upload(request)
        ref_text = self.check_ref_text(fields.ref_text)
        owner = owner_hash(caller.identity)
        limit = self.limits.max_voices_per_key
        if await asyncio.to_thread(self.store.count, None if self.shared else owner) >= limit:
            raise _too_many(limit)  # before the work; the insert checks again
        reference = await asyncio.to_thread(decode_reference, data, self.limits)
        voice = await self.clone(reference, ref_text, fields.language)
        assert voice.xvector is not None
        stored = StoredVoice(
            id=new_voice_id(),
            owner=owner,
            name=fields.name,
            description=fields.description,
            created=time.time(),
            family=checkpoint_family(info),
            variant=info.variant,
            hidden_size=int(voice.xvector.shape[0]),
            xvector=voice.xvector,
            ref_codes=voice.ref_codes,
            ref_text=voice.ref_text,
            language=fields.language,
            duration=reference.duration,
            content_hash=reference.content_hash(ref_text),
        )
        try:
            await asyncio.to_thread(self.store.add, stored, limit, self.shared)
        except TooManyVoices:
            raise _too_many(limit) from None
        self.metrics.voices_stored.set(await asyncio.to_thread(self.store.count))
        return stored

    async def _upload(self, request: Request) -> tuple[UploadFields, bytes]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        limits = self.limits
        if kind.startswith("multipart/"):
            return await self._multipart(request)
        if kind.startswith("audio/") or kind == "application/octet-stream":
            data = await read_body(request, limits.max_upload_bytes)
            return _fields(UploadFields, dict(request.query_params)), data
        if kind not in ("", "application/json"):
            raise HttpError(
                415, "unsupported_media_type", f"content type {kind!r}: send JSON or an audio file"
            )
        raw = await read_body(request, (limits.max_upload_bytes + 2) // 3 * 4 + JSON_OVERHEAD)
        return await asyncio.to_thread(_json_upload, raw, limits)  # megabytes: off the event loop

    async def _multipart(self, request: Request) -> tuple[UploadFields, bytes]:
        declared = request.headers.get("content-length", "")
        if not declared.isdigit():
            raise HttpError(411, "length_required", "a multipart upload needs a Content-Length")
        if int(declared) > self.limits.max_upload_bytes + JSON_OVERHEAD:
            raise _too_large(self.limits.max_upload_bytes)
        async with request.form(max_files=1, max_fields=8) as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise HttpError(400, "invalid_request", "file: the reference audio file is missing")
            data = await upload.read(self.limits.max_upload_bytes + 1)
            values = {k: v for k, v in form.items() if k != "file" and isinstance(v, str)}
        if len(data) > self.limits.max_upload_bytes:
            raise _too_large(self.limits.max_upload_bytes)
        return _fields(UploadFields, values), data

    async def list(self, caller: Caller) -> list[dict[str, Any]]:
        """Stored voices this caller may use with the loaded checkpoint."""
        info = self.engine.info
        if info.variant != "base":
            return []
        family, hidden = checkpoint_family(info), info.speaker_embedding_size
        voices = await asyncio.to_thread(self.store.list, self._owner(caller))
        return [v.public() for v in voices if v.family == family and v.hidden_size == hidden]

    async def get(self, voice_id: str, caller: Caller) -> Response:
        stored = await asyncio.to_thread(self.store.get, voice_id, self._owner(caller))
        if stored is None:
            return _not_found(voice_id).response()
        return JSONResponse(stored.public())

    async def delete(self, voice_id: str, caller: Caller) -> Response:
        if not await asyncio.to_thread(self.store.delete, voice_id, self._owner(caller)):
            return _not_found(voice_id).response()
        self.metrics.voices_stored.set(await asyncio.to_thread(self.store.count))
        return JSONResponse({"id": voice_id, "deleted": True})


def _json_upload(raw: bytes, limits: VoiceLimits) -> tuple[UploadFields, bytes]:
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        raise HttpError(400, "invalid_request", "the body is not JSON") from None
    upload = _fields(JsonUpload, payload)
    return upload, decode_base64_audio(upload.audio, limits)


def _fields(model: type[UploadFields], payload: Any) -> Any:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise HttpError(400, "invalid_request", f"{where}: {first['msg']}") from None


def _not_found(voice_id: str) -> HttpError:
    return HttpError(404, "voice_not_found", f"no voice {voice_id!r}")


def _too_many(limit: int) -> HttpError:
    return HttpError(409, "too_many_voices", f"this key holds {limit} voices already; delete one first")
