"""The two codecs of protocol v1, chosen by WebSocket subprotocol: msgpack (binary frames, raw
audio bytes) and JSON (text frames, audio as base64). Both carry the models of `protocol.py`."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgpack
from pydantic import ValidationError

from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import CLIENT_TYPES, ServerMessage, client_message

MSGPACK = "voicewire.v1.msgpack"
JSON = "voicewire.v1.json"
SUBPROTOCOLS = (MSGPACK, JSON)

# A message nests three levels at most; a frame nested past what a decoder allows is refused as it is
# decoded, the same way on both codecs.
TOO_DEEP = "the frame nests arrays or maps too deeply to decode"


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:4]:
        where = ".".join(str(p) for p in error["loc"][1:]) or "message"  # loc[0] is the union tag
        kind = error["type"]
        if kind == "missing":
            parts.append(f"missing field '{where}'")
        elif kind == "extra_forbidden":
            parts.append(f"unknown field '{where}'")
        else:
            parts.append(f"'{where}': {error['msg']}")
    return "; ".join(parts)


def _context_of(data: dict) -> str | None:
    context = data.get("context_id")
    return context if isinstance(context, str) and 0 < len(context) <= 64 else None


def parse(data: Any) -> Any:
    """A decoded frame (a map) -> a client message model; raises ProtocolError."""
    if not isinstance(data, dict):
        raise ProtocolError("bad_message", f"a message is a map with a 'type', got {type(data).__name__}")
    kind = data.get("type")
    if kind is None:
        raise ProtocolError("invalid_message", "missing field 'type'", _context_of(data))
    if kind not in CLIENT_TYPES:
        raise ProtocolError(
            "unknown_type",
            f"unknown message type {kind!r}; allowed: {', '.join(CLIENT_TYPES)}",
            _context_of(data),
        )
    try:
        return client_message.validate_python(data)
    except ValidationError as exc:
        raise ProtocolError("invalid_message", f"{kind}: {_describe(exc)}", _context_of(data)) from None


class Codec:
    """Decodes client frames and encodes server messages for one subprotocol."""

    def __init__(self, subprotocol: str) -> None:
        if subprotocol not in SUBPROTOCOLS:
            raise ValueError(f"unknown subprotocol {subprotocol!r}")
        self.subprotocol = subprotocol
        self.binary = subprotocol == MSGPACK

    def decode(self, text: str | None, data: bytes | None) -> Any:
        if self.binary:
            if data is None:
                raise ProtocolError("wrong_frame_type", f"{MSGPACK} takes binary frames, got a text frame")
            try:
                decoded = msgpack.unpackb(data, raw=False, strict_map_key=True)
            except msgpack.StackError:  # its unpacker stops at 1024 levels
                raise ProtocolError("bad_message", TOO_DEEP) from None
            except Exception:
                raise ProtocolError("bad_message", "the frame is not valid msgpack") from None
        else:
            if text is None:
                raise ProtocolError("wrong_frame_type", f"{JSON} takes text frames, got a binary frame")
            try:
                decoded = json.loads(text)
            except RecursionError:  # json's C decoder recurses once per level, up to the interpreter's limit
                raise ProtocolError("bad_message", TOO_DEEP) from None
            except ValueError:
                raise ProtocolError("bad_message", "the frame is not valid JSON") from None
        return parse(decoded)

    def encode(self, message: ServerMessage) -> str | bytes:
        fields = message.model_dump()
        if self.binary:
            return msgpack.packb(fields, use_bin_type=True)
        if isinstance(fields.get("data"), bytes):
            fields["data"] = base64.b64encode(fields["data"]).decode("ascii")
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
