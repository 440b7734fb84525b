"""Protocol errors: a stable code, a human message, and for fatal ones the WebSocket close code.

This is the one place that decides what a client sees for each failure (docs/protocol.md has the
same table).
"""

from __future__ import annotations

from dataclasses import dataclass

from voicewire.engine.errors import EngineError

# code -> (fatal, close code when fatal)
CODES: dict[str, tuple[bool, int]] = {
    "bad_message": (False, 0),  # not msgpack / not JSON / not a map
    "wrong_frame_type": (False, 0),  # binary frame on the JSON subprotocol, or text on msgpack
    "unknown_type": (False, 0),
    "invalid_message": (False, 0),  # missing, unknown or mistyped fields
    "message_too_large": (False, 0),
    "not_started": (False, 0),  # context messages before start
    "already_started": (False, 0),
    "unknown_context": (False, 0),
    "context_closed": (False, 0),  # text/flush/end after end or cancel
    "too_many_contexts": (False, 0),
    "text_too_long": (False, 0),
    "invalid_voice": (False, 0),
    "invalid_format": (False, 0),
    "invalid_options": (False, 0),
    "engine_full": (False, 0),  # no stream slot free right now
    "stream_failed": (False, 0),
    "unauthorized": (True, 4401),  # no, a wrong or an expired key or token
    "forbidden_origin": (True, 4403),
    "too_many_sessions": (True, 4429),
    "slow_consumer": (True, 1008),  # the client stopped reading
    "idle_timeout": (True, 1000),
    "internal_error": (True, 1011),
}


@dataclass(frozen=True)
class ProtocolError(Exception):
    code: str
    message: str
    context_id: str | None = None

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown error code {self.code!r}")

    @property
    def fatal(self) -> bool:
        return CODES[self.code][0]

    @property
    def close_code(self) -> int:
        return CODES[self.code][1]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


HTTP_STATUS = {"unauthorized": 401, "forbidden_origin": 403, "too_many_sessions": 429}


# Engine codes that a client sees under another name.
FROM_ENGINE = {"invalid_text": "invalid_message"}


def from_engine(exc: EngineError, context_id: str | None) -> ProtocolError:
    """An engine error as the client sees it."""
    code = FROM_ENGINE.get(exc.code, exc.code)
    code = code if code in CODES else "stream_failed"
    return ProtocolError(code, exc.message, context_id)
