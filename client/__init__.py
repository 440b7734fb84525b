"""voicewire.client: a Python client for protocol v1 (docs/protocol.md).

    async with await Client.connect("ws://127.0.0.1:8000", voice={"speaker": "vivian"}) as client:
        context = client.context()
        await context.push("Hello there, ")
        await context.push("how are you?")
        await context.end()
        async for pcm in context:          # float32 at client.sample_rate, Opus already decoded
            ...

It speaks msgpack, decodes Opus with opuslib (dropping the encoder's pre-skip and the padding
of the last packet), and serves any number of contexts on one socket. `client.context(speed=1.25)`
speaks a context faster (time-stretched, the pitch kept; docs/protocol.md, "Speaking rate").
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgpack
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

MSGPACK = "voicewire.v1.msgpack"
DECODED = ("opus", "pcm_s16le", "pcm_f32le", "mulaw", "alaw")  # the encodings it hands out as PCM (not mp3)
__all__ = ["Client", "ClientContext", "ServerError", "http_url", "ws_url"]
_SCHEMES = (("ws://", "http://"), ("wss://", "https://"))


def ws_url(url: str) -> str:
    """A server address as its socket's: http(s):// becomes ws(s)://. Raises ValueError for any
    other scheme (a bare host:port too, so that a typo is not taken for a path)."""
    url = url.rstrip("/")
    for ws, http in _SCHEMES:
        if url.startswith(ws):
            return url
        if url.startswith(http):
            return ws + url[len(http) :]
    raise ValueError(f"a server address starts with ws://, wss://, http:// or https://, not {url!r}")


def http_url(url: str) -> str:
    """A server address as its HTTP API's: ws(s):// becomes http(s)://."""
    url = ws_url(url)
    for ws, http in _SCHEMES:
        if url.startswith(ws):
            return http + url[len(ws) :]
    return url


class ServerError(Exception):
    """An `error` message from the server."""

    def __init__(self, message: dict[str, Any]) -> None:
        super().__init__(f"{message['code']}: {message['message']}")
        self.code: str = message["code"]
        self.context_id: str | None = message.get("context_id")
        self.fatal: bool = message.get("fatal", False)


@dataclass
class _Done:
    message: dict[str, Any]


class _OpusDecoder:
    """Raw packets -> float32 samples, minus the pre-skip, up to the reported count."""

    def __init__(self, rate: int, pre_skip: int) -> None:
        import opuslib  # here: loading it needs the system's libopus, which PCM sessions do without

        self._decoder = opuslib.Decoder(rate, 1)
        self._packet = rate // 50
        self._skip = pre_skip
        self._held = np.zeros(0, np.float32)  # decoded, waiting for the reported count
        self._owed = 0  # reported samples not yet handed out

    def feed(self, data: bytes, samples: int) -> np.ndarray:
        pcm = np.frombuffer(self._decoder.decode(data, self._packet), "<i2").astype(np.float32) / 32768.0
        if self._skip:
            cut = min(self._skip, pcm.shape[0])
            pcm, self._skip = pcm[cut:], self._skip - cut
        self._held = np.concatenate((self._held, pcm))
        self._owed += samples
        out, self._held = self._held[: self._owed], self._held[self._owed :]
        self._owed -= out.shape[0]
        return out


class ClientContext:
    """One utterance on the socket: push text, then iterate its audio."""

    def __init__(self, client: Client, context_id: str, speed: float | None = None) -> None:
        self.client = client
        self.id = context_id
        self.speed = speed  # its speaking rate, 0.25 to 4 (None: the server's 1)
        self.done: dict[str, Any] | None = None  # the `done` or `cancelled` message
        self.cancelled: dict[str, Any] | None = None  # `cancelled`, also after `done` (a late barge-in)
        self._cancelled = asyncio.Event()
        self.progress: list[dict[str, Any]] = []
        # With `timestamps="words"` in connect: each word's text, start_char, end_char, and start
        # and end in samples (docs/protocol.md, "Word timing").
        self.words: list[dict[str, Any]] = []
        self._audio: asyncio.Queue[np.ndarray | _Done | ServerError] = asyncio.Queue()
        self._decoder = (
            _OpusDecoder(client.sample_rate, client.ready["codec_delay"])
            if client.encoding == "opus"
            else None
        )

    async def push(self, text: str, flush: bool = False) -> None:
        message: dict[str, Any] = {"type": "text", "context_id": self.id, "text": text, "flush": flush}
        if self.speed is not None:  # on every text: the server takes a repeat, and the first opens it
            message["speed"] = self.speed
        await self.client.send(message)

    async def flush(self) -> None:
        await self.client.send({"type": "flush", "context_id": self.id})

    async def end(self) -> None:
        await self.client.send({"type": "end", "context_id": self.id})

    async def cancel(self, wait: bool = False) -> dict[str, Any] | None:
        """Stop now (or, after `done`, while its audio still plays: a late barge-in). The server's
        `cancelled` lands in `self.cancelled` (returned with `wait=True`); its `heard_text` (with
        word timing) is the text spoken up to the last `played()` report."""
        await self.client.send({"type": "cancel", "context_id": self.id})
        if wait:
            await self._cancelled.wait()
        return self.cancelled

    async def played(self, samples: int, underruns: int = 0) -> None:
        """Tell the server how many samples of this context the listener has heard."""
        await self.client.send(
            {"type": "playback", "context_id": self.id, "played_samples": samples, "underruns": underruns}
        )

    def _audio_message(self, message: dict[str, Any]) -> None:
        data, samples = message["data"], message["samples"]
        encoding = self.client.encoding
        if self._decoder is not None:
            pcm = self._decoder.feed(data, samples)
        elif encoding == "pcm_s16le":
            pcm = np.frombuffer(data, "<i2").astype(np.float32) / 32767.0
        elif encoding == "pcm_f32le":
            pcm = np.frombuffer(data, "<f4").copy()
        elif encoding == "alaw":
            from voicewire.server.encoder import alaw_decode

            pcm = alaw_decode(data)
        else:
            from voicewire.server.encoder import mulaw_decode

            pcm = mulaw_decode(data)
        if pcm.shape[0]:
            self._audio.put_nowait(pcm)

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[np.ndarray]:
        while True:
            item = await self._audio.get()
            if isinstance(item, _Done):
                return
            if isinstance(item, ServerError):
                raise item
            yield item

    async def read_all(self) -> np.ndarray:
        """All of the context's audio, once it is done."""
        chunks = [pcm async for pcm in self]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


class Client:
    """A protocol-v1 session over one WebSocket."""

    def __init__(self, ws: ClientConnection, ready: dict[str, Any]) -> None:
        self.ws = ws
        self.ready = ready
        self.encoding: str = ready["encoding"]
        self.sample_rate: int = ready["sample_rate"]
        self._contexts: dict[str, ClientContext] = {}
        self._ids = itertools.count(1)
        self._reader = asyncio.create_task(self._read())
        self.errors: list[ServerError] = []  # errors not tied to a context

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        voice: dict[str, Any] | None = None,
        format: dict[str, Any] | None = None,
        **start: Any,
    ) -> Client:
        """Open `url` (ws://host:port; http:// is taken too), send `start`, wait for `ready`.
        Raises ValueError for an address that is not one, OSError when it cannot be reached."""
        format = format or {"encoding": "opus", "sample_rate": 48000}
        if format.get("encoding") not in DECODED:
            raise ValueError(f"this client decodes {', '.join(DECODED)}, not {format.get('encoding')!r}")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        query = f"?token={quote(token)}" if token else ""
        ws = await connect(
            f"{ws_url(url)}/v1/stream{query}",
            subprotocols=[Subprotocol(MSGPACK)],
            additional_headers=headers,
        )
        message = {"type": "start", "voice": voice or {}, "format": format}
        await ws.send(msgpack.packb({**message, **start}))
        ready = msgpack.unpackb(await ws.recv())
        if ready["type"] != "ready":
            await ws.close()
            raise ServerError(ready)
        return cls(ws, ready)

    def context(self, context_id: str | None = None, speed: float | None = None) -> ClientContext:
        """A new context; `speed` its speaking rate (time-stretched, the pitch kept)."""
        context_id = context_id or f"ctx-{next(self._ids)}"
        context = ClientContext(self, context_id, speed)
        self._contexts[context_id] = context
        return context

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(msgpack.packb(message))

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                message = msgpack.unpackb(frame)
                context = self._contexts.get(message.get("context_id") or "")
                kind = message["type"]
                if kind == "error":
                    error = ServerError(message)
                    if context is not None:
                        context._audio.put_nowait(error)
                    else:
                        self.errors.append(error)
                elif context is None:
                    continue
                elif kind == "audio":
                    context._audio_message(message)
                elif kind == "progress":
                    context.progress.append(message)
                elif kind == "words":
                    context.words.extend(message["words"])
                elif kind in ("done", "cancelled"):
                    if kind == "cancelled":
                        context.cancelled = message
                        context._cancelled.set()
                    if context.done is None:
                        context.done = message
                        context._audio.put_nowait(_Done(message))
        finally:
            for context in self._contexts.values():
                if context.done is None:
                    context._audio.put_nowait(_Done({}))

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
