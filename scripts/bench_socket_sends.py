"""What a server worker's event loop spends to put one audio message on a socket (host only).

A worker sends every 20 ms Opus packet as a WebSocket message of its own (protocol v1). This
serves a minimal app on uvicorn with the server's WebSocket layer (`server.wire.WireProtocol`) and
has it send N audio messages to a client in this process, encoded as the server encodes them: one
ASGI send per message (as the session's send loop writes where the layer lacks FRAMES), and sends
of FRAMES batches of `--batch` messages (as it writes on the server's own layer). The CPU time is
the event loop thread's (`time.thread_time`), from the first send to the last, per message;
the modes alternate for `--rounds` rounds.

Usage: python scripts/bench_socket_sends.py [--messages N] [--batch B] [--rounds R] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.sync.client import connect

from voicewire.server import protocol as p
from voicewire.server.app import BackgroundServer
from voicewire.server.config import ServerConfig
from voicewire.server.wire import FRAMES, MSGPACK, Codec

PACKET = bytes(80)  # a 20 ms Opus packet at 32 kbit/s


def _app(messages: int, batch: int, result: dict[str, float]) -> Starlette:
    codec = Codec(MSGPACK)

    def encoded(seq: int) -> bytes:
        data = codec.encode(p.Audio(context_id="c", seq=seq, pts=seq * 960, samples=960, data=PACKET))
        assert isinstance(data, bytes)  # msgpack
        return data

    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        cpu, wall = time.thread_time(), time.perf_counter()
        if batch == 1:
            for seq in range(messages):
                await websocket.send_bytes(encoded(seq))
        else:
            for first in range(0, messages, batch):
                frames = [encoded(seq) for seq in range(first, min(messages, first + batch))]
                await websocket.send({"type": "websocket.send", FRAMES: frames})
        result["cpu_us_per_message"] = (time.thread_time() - cpu) / messages * 1e6
        result["wall_s"] = time.perf_counter() - wall
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute("/", endpoint)])
    app.state.config = ServerConfig()
    return app


def run(messages: int, batch: int) -> dict[str, float]:
    result: dict[str, float] = {}
    runner = BackgroundServer(_app(messages, batch, result))
    port = runner.start()
    try:
        with connect(f"ws://127.0.0.1:{port}/", max_size=None) as client:
            received = sum(1 for _ in client)  # until the server closes
    finally:
        runner.stop()
    assert received == messages, (received, messages)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=32, help="messages a FRAMES send (32: an 8-frame chunk)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"a send each": [], f"FRAMES of {args.batch}": []}
    for _ in range(args.rounds):
        for mode, batch in zip(runs, (1, args.batch), strict=True):
            runs[mode].append(run(args.messages, batch))
    report = {
        "messages": args.messages,
        "modes": {
            mode: {
                "cpu_us_per_message_median": round(statistics.median(r["cpu_us_per_message"] for r in rs), 2),
                "runs": [{k: round(v, 3) for k, v in r.items()} for r in rs],
            }
            for mode, rs in runs.items()
        },
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
