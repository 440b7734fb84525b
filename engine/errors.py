"""Engine errors: a stable code and a human message. The server maps codes to what clients see."""

from __future__ import annotations


class EngineError(Exception):
    code = "engine_error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple:  # keeps `code` across processes (the engine process)
        return (type(self), (self.message, self.code))


class InvalidVoice(EngineError, ValueError):
    code = "invalid_voice"


class InvalidOptions(EngineError, ValueError):
    code = "invalid_options"


class InvalidText(EngineError, ValueError):
    code = "invalid_text"  # not a string, or a string UTF-8 cannot encode (a lone surrogate)


class StreamClosed(EngineError):
    code = "stream_closed"


class EngineFull(EngineError):
    code = "engine_full"


class StreamFailed(EngineError):
    code = "stream_failed"
