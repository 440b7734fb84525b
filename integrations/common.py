"""What the framework plugins share: their keyword arguments, the `start` message those make, and
what a refusal from the server means to a framework.

The plugins speak protocol v1 (docs/protocol.md) with msgpack and raw 16-bit PCM at the
framework's sample rate, one context per turn, with word timing on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from voicewire.client import MSGPACK, ws_url

__all__ = [
    "MSGPACK",
    "PCM_RATES",
    "Sampling",
    "VoicewireError",
    "connect_headers",
    "start_message",
    "stream_url",
]

PCM_RATES = (8000, 16000, 24000, 44100, 48000)  # what `format.sample_rate` takes for PCM
# Errors that come back the same however often the request is retried: a framework should stop
# sending work rather than reconnect (a wrong key, a voice or format this server does not take).
PERMANENT = frozenset(
    {
        "unauthorized",
        "forbidden_origin",
        "invalid_voice",
        "invalid_format",
        "invalid_options",
        "invalid_message",
    }
)


@dataclass(frozen=True)
class Sampling:
    """The talker's sampling (start.sampling); None leaves the checkpoint's default. `seed` makes a
    turn repeatable: the same text, voice and seed give the same audio."""

    greedy: bool = False
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None

    def as_message(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


class VoicewireError(Exception):
    """An `error` message from the server, or a socket it closed or never opened."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"voicewire {code}: {message}")
        self.code = code
        self.message = message

    @property
    def permanent(self) -> bool:
        return self.code in PERMANENT

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> VoicewireError:
        return cls(str(message.get("code", "error")), str(message.get("message", message)))


def stream_url(url: str) -> str:
    """The socket of a server at `url` (ws://, wss://, http:// or https://; ValueError otherwise)."""
    return ws_url(url) + "/v1/stream"


def connect_headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def start_message(
    *, voice: str, language: str | None, sample_rate: int, sampling: Sampling | None
) -> dict[str, Any]:
    """`start` for a plugin's socket: `voice` is a speaker name, or a stored voice's id
    (`voice_...`, from POST /v1/voices); raw 16-bit PCM at `sample_rate`; word timing on."""
    if sample_rate not in PCM_RATES:
        raise ValueError(f"voicewire sends PCM at {', '.join(map(str, PCM_RATES))} Hz, not {sample_rate}")
    if not voice:
        raise ValueError("voice is a speaker name or a stored voice id (voice_...)")
    spec: dict[str, Any] = {"id": voice} if voice.startswith("voice_") else {"speaker": voice}
    if language:
        spec["language"] = language
    message: dict[str, Any] = {
        "type": "start",
        "voice": spec,
        "format": {"encoding": "pcm_s16le", "sample_rate": sample_rate},
        "timestamps": "words",
    }
    if sampling is not None:
        message["sampling"] = sampling.as_message()
    return message
