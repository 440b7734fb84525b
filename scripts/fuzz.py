"""Fuzz a running server's socket with random and mutated protocol-v1 messages, on both codecs.

    .venv/bin/python scripts/fuzz.py --url ws://127.0.0.1:8000 --messages 100000 [--api-key KEY]

Each session opens with a valid `start` (contexts capped at one frame, so the engine's work stays
small) or, now and then, with a fuzzed one; then come fuzzed frames: well-formed messages with
random values, mutated ones (a field dropped, retyped or added), other JSON values, and bytes that
are no message at all. After every few frames a `ping` must be answered within `--hang-s`.
Every reply must be a message of docs/protocol.md, every error a documented code; the server must
never answer `internal_error`, close a socket without a fatal error first, hang, or stop answering
`/ready`; and at the end of a session, `end` for each context id must end each. Prints one JSON report (the server's RSS before and after, from /metrics) and exits 1 on
any problem. tests/server/test_fuzz.py runs the same sessions under hypothesis in `make test`.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from pydantic import BaseModel, ValidationError
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from voicewire.engine.runtime.metrics import read_process_rss
from voicewire.server import protocol as p
from voicewire.server.errors import CODES
from voicewire.server.wire import JSON, MSGPACK

REPLIES: dict[str, type[BaseModel]] = {
    "ready": p.Ready,
    "audio": p.Audio,
    "progress": p.Progress,
    "flushed": p.Flushed,
    "done": p.Done,
    "cancelled": p.Cancelled,
    "error": p.Error,
    "pong": p.Pong,
    "words": p.Words,
}
CONTEXT_IDS = ("a", "b", "c", "ctx-1")
BAD_CONTEXT_IDS = ("", "x" * 65)
VALID_START = {"type": "start", "voice": {"speaker": "aiden"}, "max_frames": 1, "timestamps": "words"}


def json_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value, nested a little."""
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 2**63 - 1, rng.randrange(-1000, 100000)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e308, rng.uniform(-1e6, 1e6)])
    if kind in (4, 5):
        return text(rng)
    if kind == 6:
        return [json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {text(rng, 8): json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def text(rng: random.Random, longest: int = 40) -> str:
    pools = (string.printable, "héllo wörld 你好 🙂 \u200b\u0301", "\x00\x07\x1b\ufeff\uffff")
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randrange(longest + 1)))


def message(rng: random.Random) -> Any:
    """A client message with random values: mostly well-formed, some mutated, some not messages."""
    roll = rng.random()
    cid = (
        rng.choice(CONTEXT_IDS)
        if roll < 0.85
        else rng.choice(BAD_CONTEXT_IDS)
        if roll < 0.9
        else json_value(rng)
    )
    kind = rng.choice(p.CLIENT_TYPES)
    if kind == "start":
        msg: dict[str, Any] = {
            "type": "start",
            "voice": rng.choice([{}, {"speaker": rng.choice(["aiden", "nobody", ""])}, json_value(rng)]),
            "format": rng.choice(
                [{}, {"encoding": rng.choice(["opus", "pcm_s16le", "mulaw", "mp3"])}, json_value(rng)]
            ),
            "max_frames": 1 if rng.random() < 0.9 else json_value(rng),
            "timestamps": rng.choice([None, "words", json_value(rng)]),
        }
        if rng.random() < 0.3:
            msg["sampling"] = {"temperature": json_value(rng), "top_k": json_value(rng)}
    elif kind == "text":
        msg = {
            "type": "text",
            "context_id": cid,
            "text": text(rng) if rng.random() < 0.9 else json_value(rng),
        }
        if rng.random() < 0.2:
            msg["flush"] = rng.choice([True, False, json_value(rng)])
    elif kind == "playback":
        msg = {
            "type": "playback",
            "context_id": cid,
            "played_samples": rng.choice([0, 960, -5, json_value(rng)]),
        }
    elif kind == "ping":
        msg = {"type": "ping", "id": json_value(rng)}
    else:
        msg = {"type": kind, "context_id": cid}
    roll = rng.random()
    if roll < 0.15:  # mutated: a field dropped, retyped or added
        key = rng.choice([*msg, text(rng, 8)])
        if rng.random() < 0.3 and key in msg:
            del msg[key]
        else:
            msg[key] = json_value(rng)
    elif roll < 0.2:
        return json_value(rng)  # not a map, or a map of anything
    elif roll < 0.22:
        return {"type": text(rng, 10)}
    return msg


def frame(rng: random.Random, binary: bool) -> bytes | str:
    """One frame of the session's codec: an encoded message, or now and then garbage."""
    if rng.random() < 0.05:
        return rng.randbytes(rng.randrange(64)) if binary else text(rng, 64)
    msg = message(rng)
    if binary:
        if isinstance(msg, dict) and msg and rng.random() < 0.1:  # msgpack has bytes where JSON has none
            msg[rng.choice(list(msg))] = rng.randbytes(rng.randrange(16))
        return msgpack.packb(msg)
    return json.dumps(msg)


@dataclass
class Report:
    sessions: int = 0
    frames: int = 0
    replies: dict[str, int] = field(default_factory=dict)  # by type
    errors: dict[str, int] = field(default_factory=dict)  # by code
    problems: list[str] = field(default_factory=list)


class _Session:
    def __init__(self, ws: ClientConnection, binary: bool, report: Report, hang_s: float) -> None:
        self.ws, self.binary, self.report, self.hang_s = ws, binary, report, hang_s
        self.pings = 0

    def check(self, raw: bytes | str, sent: list[Any]) -> dict[str, Any]:
        if isinstance(raw, bytes) != self.binary:
            raise AssertionError(
                f"a {type(raw).__name__} frame on the {'msgpack' if self.binary else 'JSON'} socket"
            )
        reply = msgpack.unpackb(raw) if isinstance(raw, bytes) else json.loads(raw)
        model = REPLIES.get(reply.get("type"))
        if model is None:
            raise AssertionError(f"an unknown reply {reply!r}")
        try:
            model.model_validate(reply)
        except ValidationError as exc:
            raise AssertionError(f"a malformed {reply['type']}: {exc}") from None
        self.report.replies[reply["type"]] = self.report.replies.get(reply["type"], 0) + 1
        if reply["type"] == "error":
            code = reply["code"]
            self.report.errors[code] = self.report.errors.get(code, 0) + 1
            if code not in CODES or code == "internal_error":
                raise AssertionError(f"{code}: {reply['message']} (after {sent[-3:]!r})")
        return reply

    def ping(self, sent: list[Any]) -> None:
        """A ping after the frames: everything before its pong is checked."""
        self.pings += 1
        token = f"fuzz-{self.pings}"
        self.ws.send(
            msgpack.packb({"type": "ping", "id": token})
            if self.binary
            else json.dumps({"type": "ping", "id": token})
        )
        self.read_until(lambda reply: reply["type"] == "pong" and reply["id"] == token, "a pong", sent)

    def finish(self, sent: list[Any]) -> None:
        """`end` for every context id: each must come to an end (done, cancelled or an error)."""
        for cid in CONTEXT_IDS:
            end = {"type": "end", "context_id": cid}
            self.ws.send(msgpack.packb(end) if self.binary else json.dumps(end))
        pending = set(CONTEXT_IDS)

        def ended(reply: dict[str, Any]) -> bool:
            if reply["type"] in ("done", "cancelled", "error"):
                pending.discard(reply.get("context_id"))
            return not pending

        self.read_until(ended, "the end of every context", sent)

    def read_until(self, wanted: Callable[[dict[str, Any]], bool], what: str, sent: list[Any]) -> None:
        """Check every reply until `wanted(reply)`; a hang if that takes over `hang_s`."""
        deadline = time.monotonic() + self.hang_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {self.hang_s} s (after {sent[-3:]!r})")
            try:
                reply = self.check(self.ws.recv(timeout=left), sent)
            except TimeoutError:
                continue
            if wanted(reply):
                return


def run_session(
    url: str,
    binary: bool,
    rng: random.Random,
    frames: int,
    api_key: str | None = None,
    hang_s: float = 10.0,
    start: dict[str, Any] = VALID_START,
) -> Report:
    """One socket: `start` (or now and then a fuzzed one), `frames` fuzzed frames, pings between."""
    report = Report(sessions=1)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    subprotocol = MSGPACK if binary else JSON
    with connect(
        f"{url}/v1/stream", subprotocols=[subprotocol], additional_headers=headers, max_size=2**24
    ) as ws:  # type: ignore[list-item]
        session = _Session(ws, binary, report, hang_s)
        sent: list[Any] = []
        try:
            if rng.random() < 0.9:
                first: Any = start
                ws.send(msgpack.packb(first) if binary else json.dumps(first))
                sent.append(first)
            for n in range(frames):
                data = frame(rng, binary)
                ws.send(data)
                sent.append(data)
                report.frames += 1
                if n % 5 == 4 or n == frames - 1:
                    session.ping(sent)
            session.finish(sent)
        except ConnectionClosed as closed:
            report.problems.append(f"the server closed the socket ({closed.rcvd}) after {sent[-3:]!r}")
        except AssertionError as problem:
            report.problems.append(str(problem))
    return report


def http_get(url: str) -> tuple[int, str]:
    """Status and body of a GET; 0 and the reason when the server cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError as exc:
        return 0, str(exc)


def _rss(http: str) -> dict[str, float]:
    """Each server process's resident memory in MB, by role:pid, from /metrics."""
    status, body = http_get(f"{http}/metrics")
    if status != 200:
        return {}
    return {
        f"{role}:{pid}": round(rss / 2**20, 1) for (role, pid), rss in sorted(read_process_rss(body).items())
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=200)
    parser.add_argument("--api-key")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-s", type=float, default=10.0)
    parser.add_argument(
        "--voice",
        default='{"speaker": "aiden"}',
        help="the valid start's voice, JSON (one the checkpoint takes)",
    )
    args = parser.parse_args()
    from voicewire.client import http_url

    http = http_url(args.url)
    rng = random.Random(args.seed)
    total = Report(sessions=0)
    rss_before = _rss(http)
    started = time.monotonic()
    while total.frames < args.messages:
        start = {**VALID_START, "voice": json.loads(args.voice)}
        binary = rng.random() < 0.5
        report = run_session(args.url, binary, rng, args.per_session, args.api_key, args.hang_s, start)
        total.sessions += 1
        total.frames += report.frames
        for kind, count in report.replies.items():
            total.replies[kind] = total.replies.get(kind, 0) + count
        for code, count in report.errors.items():
            total.errors[code] = total.errors.get(code, 0) + count
        total.problems += report.problems
        status, _ = http_get(f"{http}/ready")
        if status >= 500:
            total.problems.append(f"/ready answered {status} after session {total.sessions}")
    print(
        json.dumps(
            {
                "sessions": total.sessions,
                "frames": total.frames,
                "replies": dict(sorted(total.replies.items())),
                "seconds": round(time.monotonic() - started, 1),
                "errors": dict(sorted(total.errors.items())),
                "rss_mb_before": rss_before,
                "rss_mb_after": _rss(http),
                "problems": total.problems[:50],
            },
            indent=1,
        )
    )
    return 1 if total.problems else 0


if __name__ == "__main__":
    sys.exit(main())
