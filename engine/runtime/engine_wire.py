"""What crosses the socket between the engine process and its servers (engine_process.py, the
servers' side, and engine_host.py, the engine process's): the messages, each pickled at protocol 5
by `pack` (which `write` sends) and read by `read`.

Servers send requests (`Open`, `Tokens`, `Cancel`, `Call`, `Bye`) in batches with each stream's
latest acknowledgement; the engine process sends events (`Chunk`, `Finished`, `Reply`) in batches
(`Events`) with its count of live streams, after a `Ready` greeting. Its owner hears `Listening` or
`StartFailed` on the control pipe and stops it with `Close`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from voicewire.engine.api import EngineInfo
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineError
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime.stream import AudioChunk, Mark, StreamResult
from voicewire.engine.runtime.text_stream import PackedTokens
from voicewire.engine.voice import Voice


def pack(message: object) -> bytes:
    """One message as it crosses the socket: pickled at protocol 5, for `Connection.send_bytes`.
    `Connection.send` uses ForkingPickler at protocol 4, which copies each numpy array into a bytes
    object first and writes through an io.BytesIO: a decoder round's audio chunks took about four
    times as long, on the engine process's GIL."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def write(conn: Connection, message: object) -> None:
    """Send one message (`pack`)."""
    conn.send_bytes(pack(message))


def read(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


@dataclass(frozen=True)
class Open:
    stream_id: int
    voice: Voice
    options: StreamOptions


@dataclass(frozen=True)
class Tokens:
    """A stream's text, tokenized in the server: a push (no mark; the first one is sent even when
    it committed no token, for the stream's first-text time), or a flush or the end with the tail."""

    stream_id: int
    tokens: PackedTokens
    mark: Mark | None = None
    # The first push's time.monotonic() in the server (0 on the others): CLOCK_MONOTONIC is one
    # clock for the host's processes, so the engine process times the text's way in.
    pushed_at: float = 0.0


@dataclass(frozen=True)
class Cancel:
    stream_id: int


@dataclass(frozen=True)
class Call:
    call_id: int
    method: str  # voice or check_voice
    args: tuple
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Close:
    """To the engine process, from its owner: stop."""


@dataclass(frozen=True)
class Bye:
    """To the engine process, from a server: this connection is done; cancel its streams."""


@dataclass(frozen=True)
class Listening:
    """To the owner, on the control pipe: the engine is loaded and its socket takes connections."""


@dataclass(frozen=True)
class Ready:
    """To a server, as it connects. The text tokenizer itself rather than the folder it was loaded
    from: the server then commits exactly the ids the engine's tokenizer makes, whatever happened
    to the folder's files since, and unpickling it is quicker than loading it (the real-size
    tokenizer: 4 MB, 0.05 s to pickle here, 0.28 s to unpickle there, against 0.97 s from_folder)."""

    info: EngineInfo
    config: EngineConfig
    tokenizer: TextTokenizer
    live_streams: int = 0


@dataclass(frozen=True)
class StartFailed:
    message: str
    error: Exception | None = None  # a mistake in the settings, raised again as it was


@dataclass(frozen=True)
class Events:
    """To a server, from the engine process: what happened to its streams since the last batch
    (`Chunk`, `Finished`, `Reply`, in order), the engine's count of live streams, and when the
    batch was written (time.monotonic(), one clock for every process on the host)."""

    live_streams: int
    events: list[Event]
    sent_at: float


@dataclass(frozen=True)
class Chunk:
    stream_id: int
    chunk: AudioChunk


@dataclass(frozen=True)
class Finished:
    stream_id: int
    result: StreamResult


@dataclass(frozen=True)
class Reply:
    call_id: int
    value: Any
    error: EngineError | None


Event = Chunk | Finished | Reply  # what an `Events` batch carries
