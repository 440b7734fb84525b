"""ElevenLabs' streaming-input WebSockets, spoken on protocol v1's sessions (docs/compat.md).

    /v1/text-to-speech/{voice_id}/stream-input        one utterance a socket
    /v1/text-to-speech/{voice_id}/multi-stream-input  several contexts a socket, by `context_id`

`ElevenLabsDialect` reads their JSON into v1 messages and writes v1's answers as theirs, so the
session, engine, limits and metrics are the ones every socket has. The query's `output_format`
picks the audio (`pcm_<rate>`, `ulaw_8000`, `alaw_8000`, `mp3_<rate>_<kbps>`), `voice_id` is a speaker name or
a stored voice id, `language_code` and `seed` are used, `voice_settings.speed` is v1's `text.speed`,
and the model, text and other voice settings are taken and ignored: there is one model here, and it
speaks text as it arrives.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import QueryParams
from starlette.websockets import WebSocket

from voicewire.client.languages import language_name
from voicewire.server import protocol as p
from voicewire.server.errors import ProtocolError

MULTI = "multi-stream-input"
SINGLE = "stream-input"
SINGLE_CONTEXT = "0"  # stream-input's one context, by its v1 id
DEFAULT_FORMAT = "mp3_44100_128"  # ElevenLabs' default
INACTIVITY_S = (20, 180)  # the default, and the most `inactivity_timeout` may ask
SPEED = (0.7, 1.2)  # voice_settings.speed, as ElevenLabs documents it (v1 takes 0.25 to 4)
CLOSE = 1008  # ElevenLabs closes with 1008 (policy violation) after an error
# A v1 ping the dialect sends itself, whose pong tells it that everything before it was written.
_FINAL = "elevenlabs-final:"
_CLOSE_SOCKET = "elevenlabs-close-socket"
# Errors about the socket's settings, after which ElevenLabs closes it.
_SETUP = frozenset({"invalid_voice", "invalid_format", "invalid_options", "unauthorized", "forbidden_origin"})
# Their names on ElevenLabs' side, where it has one.
_NAMES = {
    "idle_timeout": "input_timeout_exceeded",
    "too_many_contexts": "max_active_conversations",
    "invalid_message": "invalid_input_message",
    "bad_message": "invalid_input_message",
    "unauthorized": "auth_error",
}
_FORMAT = re.compile(r"(pcm|ulaw|alaw|mp3)_(\d+)(?:_(\d+))?")
_ENCODINGS = {"pcm": "pcm_s16le", "ulaw": "mulaw", "alaw": "alaw"}


def output_format(name: str) -> dict[str, Any]:
    """An ElevenLabs `output_format` as v1's `format` (its rates are checked by the encoder)."""
    match = _FORMAT.fullmatch(name)
    if match is None:
        raise ProtocolError(
            "invalid_format",
            f"output_format {name!r}: use pcm_<rate>, ulaw_8000, alaw_8000 or mp3_<rate>_<kbps>",
        )
    kind, rate, kbps = match.group(1), int(match.group(2)), match.group(3)
    if kind == "mp3":
        if kbps is None:
            raise ProtocolError("invalid_format", f"output_format {name!r}: mp3 takes mp3_<rate>_<kbps>")
        return {"encoding": "mp3", "sample_rate": rate, "bitrate": int(kbps) * 1000}
    if kbps is not None:
        raise ProtocolError("invalid_format", f"output_format {name!r}: {kind} takes {kind}_<rate>")
    return {"encoding": _ENCODINGS[kind], "sample_rate": rate}


@dataclass(frozen=True)
class Query:
    """What the socket's query string sets; everything else there is accepted and ignored."""

    format: dict[str, Any]
    language: str | None = None
    seed: int | None = None
    inactivity_s: float = INACTIVITY_S[0]
    auto_mode: bool = False
    key: str | None = None  # `xi_api_key` or `authorization` in the query

    @classmethod
    def parse(cls, query: QueryParams) -> Query:
        fmt = output_format(query.get("output_format") or DEFAULT_FORMAT)
        timeout = _number(query, "inactivity_timeout", INACTIVITY_S[0])
        if not 1 <= timeout <= INACTIVITY_S[1]:
            raise ProtocolError("invalid_options", f"inactivity_timeout is 1 to {INACTIVITY_S[1]} seconds")
        seed = query.get("seed")
        if seed is not None and not seed.isdigit():
            raise ProtocolError("invalid_options", "seed is a whole number")
        return cls(
            format=fmt,
            language=language_name(query.get("language_code")),
            seed=int(seed) if seed is not None else None,
            inactivity_s=timeout,
            auto_mode=query.get("auto_mode", "false").lower() == "true",
            key=query.get("xi_api_key") or query.get("authorization"),
        )


def _speed(settings: Any, context_id: str) -> float | None:
    """`voice_settings.speed`, where a message sets it; refused outside ElevenLabs' range."""
    if not isinstance(settings, dict) or settings.get("speed") is None:
        return None
    speed = settings["speed"]
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not SPEED[0] <= speed <= SPEED[1]:
        raise ProtocolError(
            "invalid_options", f"voice_settings.speed is {SPEED[0]} to {SPEED[1]}, got {speed!r}", context_id
        )
    return float(speed)


def _number(query: QueryParams, name: str, default: float) -> float:
    value = query.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        raise ProtocolError("invalid_options", f"{name} is a number, got {value!r}") from None


@dataclass
class _Context:
    """One ElevenLabs context, as the dialect tracks it beside the session's."""

    opened: bool = False  # text went to the session: its v1 context exists
    closed: bool = False  # close_context (or stream-input's end) was read
    bare_flush: bool = False  # the last thing read was a flush with no new text
    spaced: bool = True  # the text sent so far ends in whitespace (or none was sent)
    space_owed: bool = False  # a whitespace-only message came: the next text is a new word
    final: bool = False  # its final message was written
    cancelled: bool = False  # a cancel went to the session
    held: list[p.Audio] = field(default_factory=list)  # this chunk's audio, until its words are in
    speed: float | None = None  # voice_settings.speed, for its v1 context's opening text
    last_char: int = 0  # end_char of the last word aligned
    aligned: list[p.WordTiming] = field(default_factory=list)  # words not yet in an audio message


class ElevenLabsDialect:
    """One socket's translation. `multi`: multi-stream-input (contexts by `context_id`), else
    stream-input (one utterance; the socket closes after its final message)."""

    chunk_sent = True  # a chunk's audio message goes out with the words spoken in it

    def __init__(self, voice_id: str, query: Query, multi: bool) -> None:
        self.voice_id = voice_id
        self.query = query
        self.multi = multi
        self.first_frame: str | None = None  # read before the session, for its credentials
        self._contexts: dict[str, _Context] = {}
        self._closing = False  # close_socket, or stream-input's end: close once all is final
        self._rate = int(query.format["sample_rate"])
        self._first = True  # the next frame is the socket's first: its voice settings are the socket's
        self._speed: float | None = None  # the first message's voice_settings.speed: every context's default

    def opening(self) -> list[Any]:
        """The session's `start` (from the path and query), then the first frame's messages."""
        voice: dict[str, Any] = (
            {"id": self.voice_id} if self.voice_id.startswith("voice_") else {"speaker": self.voice_id}
        )
        if self.query.language:
            voice["language"] = self.query.language
        start: dict[str, Any] = {
            "type": "start",
            "voice": voice,
            "format": self.query.format,
            "timestamps": "words",
        }
        if self.query.seed is not None:
            start["sampling"] = {"seed": self.query.seed}
        messages: list[Any] = [p.client_message.validate_python(start)]
        if self.first_frame is not None:
            messages += self.read(self.first_frame, None)
        return messages

    # --- client frames -> v1 -------------------------------------------------------------------

    def read(self, text: str | None, data: bytes | None) -> list[Any]:
        if text is None:
            raise ProtocolError("wrong_frame_type", "ElevenLabs' sockets take JSON text frames")
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            raise ProtocolError("bad_message", "the frame is not valid JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("bad_message", "a message is a JSON object")
        if message.get("close_socket") is True:
            return self._close_socket()
        context_id = self._context_id(message)
        words = message.get("text")
        if words is not None and not isinstance(words, str):
            raise ProtocolError("invalid_message", "text is a string", context_id)
        flush = message.get("flush") is True
        speed = _speed(message.get("voice_settings"), context_id)
        first, self._first = self._first, False
        if first and speed is not None:
            self._speed = speed
        context = self._contexts.setdefault(context_id, _Context())
        if speed is not None and not context.opened:  # a context's speed is fixed once it speaks
            context.speed = speed
        out: list[Any] = []
        if words and words.strip():
            if context.closed:
                raise ProtocolError("context_closed", f"context {context_id!r} was closed", context_id)
            # Every text carries it (v1 takes a repeat), so a text whose context the session refused
            # to open (too many contexts) leaves the next one to open it at the same speed.
            at = context.speed if context.speed is not None else self._speed
            text = self._joined(context, words)
            out.append(p.Text(type="text", context_id=context_id, text=text, flush=flush, speed=at))
            context.opened, context.bare_flush = True, False
        elif words:  # whitespace only: the opening " ", or a keep-alive; a word break all the same
            context.space_owed = context.opened
        elif not self.multi and words == "" and not flush:  # stream-input's end of input
            return self._end_single(context)
        if flush and not (words and words.strip()):
            context.bare_flush = True
            if context.opened and not context.closed:
                out.append(p.Flush(type="flush", context_id=context_id))
        if message.get("close_context") is True and self.multi:
            out += self._close_context(context_id, context)
        return out

    def _context_id(self, message: dict[str, Any]) -> str:
        if not self.multi:
            return SINGLE_CONTEXT
        context_id = message.get("context_id", message.get("contextId"))
        if context_id is None:
            return "default"  # ElevenLabs' own name for a context never named
        if not isinstance(context_id, str) or not 0 < len(context_id) <= 64:
            raise ProtocolError("invalid_message", "context_id is a string of 1 to 64 characters")
        return context_id

    def _joined(self, context: _Context, words: str) -> str:
        """Text as the session gets it. A message that starts a new word gets a space before it: after
        a whitespace-only message, or in auto_mode, where each message is a whole sentence (Pipecat
        sends sentences without the space between them); otherwise pieces run on as sent (tokens)."""
        owed = context.space_owed or (self.query.auto_mode and context.opened)
        if owed and not context.spaced and not words[0].isspace():
            words = " " + words
        context.space_owed = False
        context.spaced = words[-1].isspace()
        return words

    def _close_context(self, context_id: str, context: _Context) -> list[Any]:
        """close_context: after a flush with nothing new (a reply's end) the context finishes what
        was flushed; otherwise (a barge-in) it stops now. Its final message follows either way."""
        if context.closed:
            # Closed after its flush and still speaking: a barge-in after the whole reply was sent
            # (Pipecat closes a context at its reply's end, and again when the listener interrupts).
            if context.opened and not context.final and not context.cancelled:
                context.cancelled = True
                return [p.Cancel(type="cancel", context_id=context_id)]
            return []
        context.closed = True
        if not context.opened:
            return [p.Ping(type="ping", id=_FINAL + context_id)]  # nothing to speak: final at once
        if context.bare_flush:
            return [p.End(type="end", context_id=context_id)]
        context.cancelled = True
        return [p.Cancel(type="cancel", context_id=context_id)]

    def _end_single(self, context: _Context) -> list[Any]:
        self._closing = True
        if context.closed:
            return []
        context.closed = True
        if not context.opened:
            return [p.Ping(type="ping", id=_FINAL + SINGLE_CONTEXT)]
        return [p.End(type="end", context_id=SINGLE_CONTEXT)]

    def _close_socket(self) -> list[Any]:
        """Every context finishes what it was given, then the socket closes."""
        self._closing = True
        out: list[Any] = []
        for context_id, context in self._contexts.items():
            if context.opened and not context.closed:
                context.closed = True
                out.append(p.End(type="end", context_id=context_id))
        return [*out, p.Ping(type="ping", id=_CLOSE_SOCKET)]

    # --- v1 -> ElevenLabs frames ---------------------------------------------------------------

    def write(self, message: p.ServerMessage) -> list[str | bytes]:
        if isinstance(message, p.Audio | p.Words | p.ChunkSent):
            context = self._contexts.get(message.context_id)
            if context is None:
                return []
            if isinstance(message, p.Audio):  # its words come after it: the chunk's audio waits for them
                context.held.append(message)
            elif isinstance(message, p.Words):
                context.aligned += message.words
            else:  # the context's last message waits on: its last words are timed just before `done`
                return self._release(context, keep_last=bool(context.held) and context.held[-1].final)
            return []
        if isinstance(message, p.Done | p.Cancelled):
            context = self._contexts.get(message.context_id)
            if context is None or context.final:  # a second answer (a cancel crossed its done)
                return []
            out = self._release(context) if isinstance(message, p.Done) else []
            if context.aligned and isinstance(message, p.Done):  # timed after the last audio went out
                alignment = self._alignment(context, 0, 0, last=True)  # at its end, taking no time
                out.append(
                    self._frame(
                        message.context_id, audio="", alignment=alignment, normalizedAlignment=alignment
                    )
                )
            context.held = []  # a cancelled context's audio stops at the cancel
            return [*out, self._final(message.context_id)]
        if isinstance(message, p.Pong) and isinstance(message.id, str) and message.id.startswith(_FINAL):
            return [self._final(message.id[len(_FINAL) :])]
        if isinstance(message, p.Error):
            return [error_frame(message, self.multi)]
        return []  # progress, flushed, ready, pong: ElevenLabs has no word for them

    def _release(self, context: _Context, keep_last: bool = False) -> list[str | bytes]:
        """A chunk's audio, each message with the characters spoken in it (`keep_last`: all but
        the context's last message, which waits for its last words)."""
        cut = len(context.held) - 1 if keep_last else len(context.held)
        held, context.held = context.held[:cut], context.held[cut:]
        return [self._audio(context, audio, last=i == len(held) - 1) for i, audio in enumerate(held)]

    def closes_after(self, message: p.ServerMessage) -> int | None:
        """After an error about the socket's settings, 1008 (as ElevenLabs); after the last final
        message of a socket told to close (close_socket, stream-input's end), 1000."""
        if isinstance(message, p.Error) and message.code in _SETUP:
            return CLOSE
        if self._closing and isinstance(message, p.Done | p.Cancelled | p.Pong) and not self._open():
            return 1000
        return None

    def close_code(self, error: ProtocolError) -> int:
        return CLOSE

    def _open(self) -> bool:
        """Whether a context still owes its final message."""
        return any(c.opened and not c.final for c in self._contexts.values())

    def _frame(self, context_id: str, **fields: Any) -> str:
        if self.multi:
            fields["contextId"] = context_id
        fields["isFinal"] = False
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    def _final(self, context_id: str) -> str:
        context = self._contexts.get(context_id)
        if context is not None:
            context.closed = context.final = True
        fields: dict[str, Any] = {"isFinal": True}
        if self.multi:
            fields["contextId"] = context_id
        else:
            fields.update(audio=None, alignment=None, normalizedAlignment=None)
        return json.dumps(fields, separators=(",", ":"))

    def _audio(self, context: _Context, audio: p.Audio, last: bool) -> str:
        alignment = self._alignment(context, audio.pts, audio.samples, last)
        data = base64.b64encode(audio.data).decode()
        return self._frame(audio.context_id, audio=data, alignment=alignment, normalizedAlignment=alignment)

    def _alignment(self, context: _Context, pts: int, samples: int, last: bool) -> dict[str, Any]:
        """The characters spoken in an audio message, timed in ms from its first sample, as
        ElevenLabs times them: each word's (with the space before it) spread over its span. A word
        whose timing came only after its audio was sent starts this message (at 0). (The session
        times words as a chunk's audio goes out; the chunk's audio waits for them: `ChunkSent`.) Their times run
        to the message's end, so a client that adds up the messages' alignments (Pipecat) keeps
        pace with the audio; a message in which no word begins carries one empty character for its
        length.
        Approximate, as the word timing is (docs/compat.md)."""
        ms = 1000 / self._rate
        chars: list[str] = []
        bounds: list[float] = []
        # The chunk's last message takes every word timed so far; one before it, those begun in it.
        taken = len(context.aligned) if last else sum(w.start < pts + samples for w in context.aligned)
        for word in context.aligned[:taken]:
            text = word.text
            if word.start_char > context.last_char > 0:  # a space before it (none in Chinese)
                text = " " + text
            context.last_char = word.end_char
            begin = min(max(word.start - pts, 0), samples)
            end = min(max(word.end - pts, begin), samples)
            for i in range(len(text)):
                chars.append(text[i])
                bounds.append((begin + (end - begin) * i / len(text)) * ms)
        del context.aligned[:taken]
        if not chars:  # an empty character, so joined characters still spell the text
            chars, bounds = [""], [0.0]
        starts = [round(b) for b in bounds]
        ends = [*starts[1:], round(samples * ms)]
        return {
            "chars": chars,
            "charStartTimesMs": starts,
            "charDurationsMs": [max(e - b, 0) for b, e in zip(starts, ends, strict=True)],
        }


def refusal(error: ProtocolError, multi: bool) -> str:
    """An error before the socket has a session (a bad query), in ElevenLabs' shape."""
    return error_frame(p.Error(code=error.code, message=error.message, context_id=None, fatal=True), multi)


def error_frame(error: p.Error, multi: bool) -> str:
    """`{message, error, code, contextId?}`: ElevenLabs' name for the error where it has one."""
    fields: dict[str, Any] = {
        "message": error.message,
        "error": _NAMES.get(error.code, error.code),
        "code": CLOSE,
    }
    if error.context_id is not None and multi:
        fields["contextId"] = error.context_id
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


async def credentials(websocket: WebSocket, dialect: ElevenLabsDialect, open_server: bool) -> dict[str, str]:
    """The caller's key as the `Authorization` header Auth checks: the `xi-api-key` header, the
    query's `xi_api_key` / `authorization`, or (read ahead, and kept for the session) the first
    message's `xi_api_key` / `authorization`. A key may be one of ours or a browser token."""
    key = websocket.headers.get("xi-api-key") or dialect.query.key
    if key is None and not open_server:
        try:
            first = await asyncio.wait_for(websocket.receive_text(), dialect.query.inactivity_s)
        except (TimeoutError, KeyError):  # no frame, or a binary one
            raise ProtocolError("unauthorized", "no credentials: send the xi-api-key header") from None
        dialect.first_frame = first
        with contextlib.suppress(ValueError, AttributeError):
            fields = json.loads(first)
            key = fields.get("xi_api_key") or fields.get("authorization")
    headers = {"authorization": f"Bearer {_bare(key)}"} if key else {}
    if "origin" in websocket.headers:
        headers["origin"] = websocket.headers["origin"]
    return headers


def _bare(key: str) -> str:
    return key[7:].strip() if key.lower().startswith("bearer ") else key.strip()
