"""A minimal protocol-v1 client for tests, on the `websockets` asyncio client."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection, connect

from voicewire.server.wire import JSON, MSGPACK


class WireClient:
    def __init__(self, ws: ClientConnection, subprotocol: str) -> None:
        self.ws = ws
        self.binary = subprotocol == MSGPACK

    @classmethod
    async def open(cls, url: str, subprotocol: str = MSGPACK) -> WireClient:
        ws = await connect(f"{url}/v1/stream", subprotocols=[subprotocol], max_size=2**22)
        return cls(ws, subprotocol)

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(msgpack.packb(message) if self.binary else json.dumps(message))

    async def recv(self, timeout: float = 30) -> dict[str, Any]:
        frame = await asyncio.wait_for(self.ws.recv(), timeout)
        if self.binary:
            assert isinstance(frame, bytes), "msgpack sessions get binary frames"
            return msgpack.unpackb(frame)
        assert isinstance(frame, str), "JSON sessions get text frames"
        message = json.loads(frame)
        if message.get("type") == "audio":
            message["data"] = base64.b64decode(message["data"])
        return message

    async def start(self, **fields: Any) -> dict[str, Any]:
        await self.send({"type": "start", **fields})
        ready = await self.recv()
        assert ready["type"] == "ready", ready
        return ready

    async def until(self, predicate, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Receive until `predicate(message)`; returns it and everything before it."""
        seen = []
        while True:
            message = await self.recv(timeout)
            if predicate(message):
                return message, seen
            seen.append(message)

    async def close(self) -> None:
        await self.ws.close()


__all__ = ["JSON", "MSGPACK", "WireClient"]
