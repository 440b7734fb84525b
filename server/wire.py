"""The two codecs of protocol v1, chosen by WebSocket subprotocol: msgpack (binary frames, raw
audio bytes) and JSON (text frames, audio as base64). Both carry the models of `protocol.py`.
Below them, `WireProtocol`: the WebSocket layer under uvicorn, for the faults that layer handles."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import msgpack
from pydantic import ValidationError
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.utils import ClientDisconnected, get_client_addr
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState, PayloadTooBig
from websockets.frames import CloseCode, Frame, Opcode

from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import CLIENT_TYPES, Error, ServerMessage, client_message

log = logging.getLogger(__name__)

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


class Dialect(Protocol):
    """What a socket speaks, as protocol v1 (a Session serves only v1's messages): each client frame
    read as the v1 messages it means, each v1 server message written as the frames that say it in
    the dialect (none for one it has no word for). `Codec` is v1 itself; server/elevenlabs.py speaks
    ElevenLabs' stream-input sockets."""

    # Whether the session tells it, with the internal ChunkSent, that a chunk's audio, progress and
    # words are all out (a dialect that groups them per chunk); one message per chunk saved if not.
    chunk_sent: bool

    def opening(self) -> list[Any]:
        """Messages the session handles before the first frame (a dialect whose socket says its
        settings in its URL starts the session itself)."""
        ...

    def read(self, text: str | None, data: bytes | None) -> list[Any]:
        """Raises ProtocolError for a frame the dialect refuses."""
        ...

    def write(self, message: ServerMessage) -> list[str | bytes]: ...

    def closes_after(self, message: ServerMessage) -> int | None:
        """The close code, when the server closes the socket once `message` is written."""
        ...

    def close_code(self, error: ProtocolError) -> int:
        """The close code after a fatal error."""
        ...


class Codec:
    """Decodes client frames and encodes server messages for one subprotocol."""

    def __init__(self, subprotocol: str) -> None:
        if subprotocol not in SUBPROTOCOLS:
            raise ValueError(f"unknown subprotocol {subprotocol!r}")
        self.subprotocol = subprotocol
        self.binary = subprotocol == MSGPACK
        self.chunk_sent = False  # v1 has no such message

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

    def opening(self) -> list[Any]:
        return []

    def read(self, text: str | None, data: bytes | None) -> list[Any]:
        return [self.decode(text, data)]

    def write(self, message: ServerMessage) -> list[str | bytes]:
        return [self.encode(message)]

    def closes_after(self, message: ServerMessage) -> int | None:
        return None

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code

    def encode(self, message: ServerMessage) -> str | bytes:
        fields = message.model_dump()
        if self.binary:
            return msgpack.packb(fields, use_bin_type=True)
        if isinstance(fields.get("data"), bytes):
            fields["data"] = base64.b64encode(fields["data"]).decode("ascii")
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


# ASGI keys this server's WebSocket layer adds. A `websocket.send` with UNPACED true is written at once,
# even to a client that stopped reading (a session's last error); a `websocket.disconnect` with
# REFUSED names the error code of a client frame the WebSocket layer refused. A `websocket.send`
# with FRAMES, a list of frames (bytes: binary, str: text), writes them all in order, after one wait
# for the socket and in one write; the layer names FRAMES in the scope's extensions, and an app
# under another server sends one frame per event.
UNPACED = "voicewire.unpaced"
REFUSED = "voicewire.refused"
FRAMES = "voicewire.frames"


class WireProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol on websockets' sans-I/O core (`ws="auto"`), changed where a client
    fault or a client that stopped reading meets the socket itself:

    - A frame that the layer must refuse, one over `ws_max_size` (not read, so memory stays bounded) or
      a text frame that is not UTF-8 (RFC 6455 fails the connection), gets the session's `error`
      (`message_too_large` or `bad_message`, fatal) and then the close frame (1009 or 1007), with one
      INFO log line; uvicorn logged the second at ERROR with a traceback and said nothing first.
    - The server then half-closes and discards what the client still sends, as websockets does,
      instead of closing at once: a reset with the client's frame still unread could lose the error.
    - A close frame, and a send marked UNPACED, are written without waiting for the client to read.
    - A close that the client does not answer within `close_timeout` aborts the connection, so a
      client that never reads again does not hold it (uvicorn's close waited for its buffer to drain).
    - A send of FRAMES writes many frames for one trip through the ASGI layers: a chunk of audio is
      many 20 ms packets, and a worker's event loop spent more on each packet's send than on the
      rest of its way to the socket.
    """

    subprotocol: str | None = None
    refused = False  # this layer failed the connection: the app's sends find it closed

    async def send(self, message: ASGISendEvent) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            self.subprotocol = message.get("subprotocol")  # type: ignore[assignment]
        elif self.handshake_complete and self.initial_response is None and not self.disconnected:
            if self.refused:
                if kind == "websocket.send":
                    raise ClientDisconnected
                return
            if not self.close_sent and (kind == "websocket.close" or message.get(UNPACED)):
                try:
                    self._write_now(message)
                except InvalidState:
                    raise ClientDisconnected from None
                return
            frames: list[bytes | str] | None = message.get(FRAMES)  # type: ignore[assignment]
            if frames is not None and not self.close_sent:
                await self._write_frames(frames)
                return
        try:
            await super().send(message)
        except RuntimeError:  # it waited for the socket, and meanwhile this layer failed it
            if self.refused:
                raise ClientDisconnected from None
            raise

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions = self.scope.get("extensions") if hasattr(self, "scope") else None  # no scope: refused
        if extensions is not None:
            extensions[FRAMES] = {}

    async def _write_frames(self, frames: list[bytes | str]) -> None:
        """FRAMES: as uvicorn writes one frame (after waiting while the socket's buffer is over its
        high-water mark), but all of them."""
        await self.writable.wait()
        if self.disconnected or self.refused:  # meanwhile
            raise ClientDisconnected
        if self.close_sent:
            raise RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close'.")
        try:
            for frame in frames:
                if isinstance(frame, bytes):
                    self.conn.send_binary(frame)
                else:
                    self.conn.send_text(frame.encode())
        except InvalidState:
            raise ClientDisconnected from None
        self.transport.write(b"".join(self.conn.data_to_send()))

    def _write_now(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "websocket.send":
            data = message.get("bytes")
            if data is not None:
                self.conn.send_binary(data)
            else:
                self.conn.send_text(message["text"].encode())
            self.transport.write(b"".join(self.conn.data_to_send()))
        elif not self.transport.is_closing():
            code = message.get("code", 1000)
            reason = message.get("reason") or ""
            self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
            self.conn.send_close(code, reason)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self._await_close()

    def _await_close(self) -> None:
        """The close frame is out: read on (the client's close, or what it still sends) until the
        client closes, for `close_timeout` at most."""
        self.close_sent = True
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.abort)

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()  # checked here, so that uvicorn's traceback never comes
            except UnicodeDecodeError as exc:
                self.frames = []
                if not self.refused:
                    where = f"{exc.reason} at byte {exc.start}"
                    log.info(
                        "%s sent a text frame that is not UTF-8 (%s): closing with 1007", self._peer(), where
                    )
                    self.conn.fail(CloseCode.INVALID_DATA, where)
                    self._refuse(
                        "bad_message", f"a text frame must be UTF-8: {where}; the socket closes (1007)"
                    )
                return
        super().send_receive_event_to_app()

    def handle_parser_exception(self) -> None:
        exc = self.conn.parser_exc
        if self.refused:
            return  # websockets discards what follows
        if self.close_sent or not self.handshake_complete or not isinstance(exc, PayloadTooBig):
            super().handle_parser_exception()
            return
        limit, size = self.config.ws_max_size, (exc.size or 0) + (exc.current_size or 0)
        log.info(
            "%s sent a frame of %d bytes, over the %d a socket reads: closing with 1009",
            self._peer(),
            size,
            limit,
        )
        self._refuse(
            "message_too_large",
            f"a frame over {limit} bytes is not read, got {size}; the socket closes (1009)",
        )

    def _refuse(self, code: str, message: str) -> None:
        """websockets has failed the connection (its close frame and end of stream are queued): the
        session's error goes out before them, and the app hears why."""
        self.refused = True
        close = self.conn.close_sent
        assert close is not None
        output = self.conn.data_to_send()
        self.handle_events()  # frames that came before the refused one still reach the app
        encoded = Codec(self.subprotocol or JSON).encode(Error(code=code, message=message, fatal=True))
        if isinstance(encoded, bytes):
            error = Frame(Opcode.BINARY, encoded)
        else:
            error = Frame(Opcode.TEXT, encoded.encode())
        closing = Frame(Opcode.CLOSE, close.serialize()).serialize(mask=False)
        at = output.index(closing) if closing in output else 0
        output.insert(at, error.serialize(mask=False))
        refused: Any = {
            "type": "websocket.disconnect",
            "code": close.code,
            "reason": close.reason,
            REFUSED: code,
        }
        self.queue.put_nowait(refused)
        self.transport.write(b"".join(output))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._await_close()

    def _peer(self) -> str:
        return get_client_addr(self.scope) if hasattr(self, "scope") else "a client"
