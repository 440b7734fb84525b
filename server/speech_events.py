"""OpenAI's speech stream: the events of `POST /v1/audio/speech` with `stream_format: "sse"`, typed
once, and their server-sent-event framing (docs/compat.md).

Each event is one `data:` line of JSON discriminated by `type`, then a blank line; there is no
`event:` line and no `[DONE]` sentinel, as OpenAI sends it. The deltas carry, base64, exactly the
bytes the `audio` stream format would send for the same request (a WAV header first for `wav`).
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel

MEDIA_TYPE = "text/event-stream"
# Proxies must pass each event on as it comes, not cache or gather the stream.
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class SpeechUsage(BaseModel):
    input_tokens: int  # text tokens of `input` and `instructions`, by the checkpoint's tokenizer
    output_tokens: int  # codec frames generated (one talker token each; 12.5 a second)
    total_tokens: int


class SpeechAudioDelta(BaseModel):
    type: Literal["speech.audio.delta"] = "speech.audio.delta"
    audio: str  # base64 of the next bytes of audio

    @classmethod
    def of(cls, data: bytes) -> SpeechAudioDelta:
        return cls(audio=base64.b64encode(data).decode("ascii"))


class SpeechAudioDone(BaseModel):
    type: Literal["speech.audio.done"] = "speech.audio.done"
    usage: SpeechUsage


class ErrorBody(BaseModel):
    message: str
    type: str
    code: str


class SpeechError(BaseModel):
    """Ours, not OpenAI's: a failure after the 200 went out ends the stream with this event. Its
    `error` key is the one OpenAI's SDKs raise an APIError for in any event stream."""

    type: Literal["error"] = "error"
    error: ErrorBody

    @classmethod
    def of(cls, status: int, code: str, message: str) -> SpeechError:
        kind = "invalid_request_error" if status < 500 else "server_error"  # as http_errors.py
        return cls(error=ErrorBody(message=message, type=kind, code=code))


SpeechEvent = SpeechAudioDelta | SpeechAudioDone | SpeechError


def frame(event: SpeechEvent) -> bytes:
    """One server-sent event: `data: {json}` and a blank line."""
    return b"data: " + event.model_dump_json().encode() + b"\n\n"
