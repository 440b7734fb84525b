"""What the framework plugins share: their keyword arguments, the `start` message those make, and
what a refusal from the server means to a framework.

The plugins speak protocol v1 (docs/protocol.md) with msgpack and raw 16-bit PCM at the
framework's sample rate, one context per turn, with word timing on.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voicewire.client import MSGPACK, ws_url
from voicewire.client.languages import language_name

__all__ = [
    "MSGPACK",
    "PCM_RATES",
    "Sampling",
    "VoicewireError",
    "closed_error",
    "connect_headers",
    "handshake",
    "start_message",
    "stream_url",
]

PCM_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)  # what `format.sample_rate` takes for PCM
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


# A refused socket's close code, for when the refusal's `error` message was not read.
CLOSE_CODES = {4401: "unauthorized", 4403: "forbidden_origin", 4429: "too_many_sessions"}


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
    name = language_name(language)
    if name:
        spec["language"] = name
    message: dict[str, Any] = {
        "type": "start",
        "voice": spec,
        "format": {"encoding": "pcm_s16le", "sample_rate": sample_rate},
        "timestamps": "words",
    }
    if sampling is not None:
        message["sampling"] = sampling.as_message()
    return message


def closed_error(closed: ConnectionClosed) -> VoicewireError:
    """A closed socket as an error: the refusal its close code names, or `closed`."""
    code = closed.rcvd.code if closed.rcvd is not None else 0
    reason = closed.rcvd.reason if closed.rcvd is not None else ""
    return VoicewireError(
        CLOSE_CODES.get(code, "closed"), reason or f"the server closed the socket ({closed})"
    )


async def handshake(websocket: ClientConnection, start: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send `start` on a new socket and return the server's `ready`. Raises VoicewireError for a
    refusal: its `error` message or, if the socket closed before that was read, its close code
    (a wrong key is refused as soon as the socket opens, so `start` may meet a closed socket);
    TimeoutError when no answer comes in `timeout` seconds."""
    with contextlib.suppress(ConnectionClosed):  # the refusal is read below
        await websocket.send(msgpack.packb(start))
    try:
        reply = msgpack.unpackb(await asyncio.wait_for(websocket.recv(), timeout))
    except ConnectionClosed as exc:
        raise closed_error(exc) from None
    if reply.get("type") != "ready":
        raise VoicewireError.from_message(reply)
    return reply
