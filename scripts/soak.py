"""Soak a running server: N sessions for M minutes of random turns, cancels and disconnects, with
the resident memory of every server process sampled over time.

    .venv/bin/python scripts/soak.py --sessions 32 --minutes 10 [--url ws://127.0.0.1:8000]

Each session opens a socket (msgpack, Opus), then loops over turns: text sent in pieces as an LLM
writes it, then one of: `end` and read to `done`, `cancel` after a random delay, or the socket
dropped mid-turn (a new one is opened). Every `--sample-s` it reads each server process's resident
memory from /metrics (`voicewire_process_resident_bytes`, by role and pid: the engine process and
every worker) and asks /ready. Prints one JSON report: turns by outcome, errors by code, and per
process the RSS at the first sample after `--warmup-s`, at the end, its peak and its growth (from
the warm-up on, and over the second half of the run); exits
1 when /ready failed, the server answered `internal_error`, or a process grew by more than
`--max-growth` (5%).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
from fuzz import http_get  # scripts/fuzz.py: run as a script, this folder is on the path
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from voicewire.client import http_url
from voicewire.engine.runtime.metrics import read_process_rss

WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars hum softly tonight".split()


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.turns: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.until = time.monotonic() + args.minutes * 60

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    async def session(self, n: int) -> None:
        rng = random.Random(self.args.seed * 1000 + n)
        headers = {"Authorization": f"Bearer {self.args.api_key}"} if self.args.api_key else None
        while time.monotonic() < self.until:
            try:
                async with connect(
                    f"{self.args.url}/v1/stream",
                    subprotocols=["voicewire.v1.msgpack"],  # type: ignore[list-item]
                    additional_headers=headers,
                ) as ws:
                    await ws.send(msgpack.packb({"type": "start", "voice": json.loads(self.args.voice)}))
                    ready = msgpack.unpackb(await ws.recv())
                    if ready["type"] != "ready":
                        self.count(self.errors, ready.get("code", "?"))
                        await asyncio.sleep(1)
                        continue
                    turn = 0
                    while time.monotonic() < self.until:
                        turn += 1
                        if not await self.turn(ws, rng, f"s{n}-t{turn}"):
                            break  # dropped: a new socket
            except (ConnectionClosed, OSError) as exc:
                self.count(self.errors, f"connection: {type(exc).__name__}")
                await asyncio.sleep(0.5)

    async def turn(self, ws: ClientConnection, rng: random.Random, cid: str) -> bool:
        """One turn; False when it dropped the socket."""
        outcome = rng.choices(["end", "cancel", "drop"], weights=[6, 3, 1])[0]
        words = [rng.choice(WORDS) for _ in range(rng.randrange(3, 25))]
        for word in words:
            await ws.send(msgpack.packb({"type": "text", "context_id": cid, "text": word + " "}))
            await asyncio.sleep(rng.uniform(0.01, 0.08))
        if outcome == "drop":
            await asyncio.sleep(rng.uniform(0, 1.0))
            self.count(self.turns, "dropped")
            return False
        if outcome == "cancel":
            await asyncio.sleep(rng.uniform(0, 1.0))
            await ws.send(msgpack.packb({"type": "cancel", "context_id": cid}))
            final = ("cancelled", "done")
        else:
            await ws.send(msgpack.packb({"type": "end", "context_id": cid}))
            final = ("done",)
        while True:
            message = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 120))
            if message["type"] == "error":
                self.count(self.errors, message["code"])
                if message.get("context_id") == cid:
                    break
            elif message["type"] in final and message.get("context_id") == cid:
                break
        self.count(self.turns, outcome)
        await asyncio.sleep(rng.uniform(0, 0.5))
        return True


async def _sample(
    http: str, every: float, until: float, timeline: dict[str, list[tuple[float, float]]], failures: list[str]
) -> None:
    started = time.monotonic()
    while time.monotonic() < until:
        at = round(time.monotonic() - started, 1)
        status, body = await asyncio.to_thread(http_get, f"{http}/metrics")
        for (role, pid), rss in read_process_rss(body).items() if status == 200 else ():
            timeline.setdefault(f"{role}:{pid}", []).append((at, round(rss / 2**20, 1)))
        ready, _ = await asyncio.to_thread(http_get, f"{http}/ready")
        if ready != 200:
            failures.append(f"/ready answered {ready} at {at} s")
        await asyncio.sleep(every)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    soak = Soak(args)
    timeline: dict[str, list[tuple[float, float]]] = {}
    failures: list[str] = []
    sampler = asyncio.create_task(_sample(http_url(args.url), args.sample_s, soak.until, timeline, failures))
    await asyncio.gather(*(soak.session(n) for n in range(args.sessions)))
    await sampler
    memory = {}
    for name, points in timeline.items():
        settled = [rss for t, rss in points if t >= args.warmup_s] or [points[-1][1]]
        # A leak keeps growing; a heap filling to its working set (allocator arenas, Python's
        # object pools at the peak of concurrent turns) levels off. The second half's growth tells
        # the two apart when the warm-up was too short to see the level.
        halfway = points[-1][0] / 2
        second_half = [rss for t, rss in points if t >= halfway] or [points[-1][1]]
        memory[name] = {
            "rss_mb_after_warmup": settled[0],
            "rss_mb_end": points[-1][1],
            "rss_mb_peak": max(rss for _, rss in points),
            "growth": round(points[-1][1] / settled[0] - 1, 4),
            "growth_second_half": round(points[-1][1] / second_half[0] - 1, 4),
            "samples": points,
        }
    return {
        "sessions": args.sessions,
        "minutes": args.minutes,
        "turns": soak.turns,
        "errors": soak.errors,
        "failures": failures,
        "memory": memory,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--voice", default='{"speaker": "aiden"}', help="the sessions' voice, JSON")
    parser.add_argument("--api-key")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-s", type=float, default=10)
    parser.add_argument("--warmup-s", type=float, default=60, help="growth is measured from here")
    parser.add_argument("--max-growth", type=float, default=0.05)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    report = asyncio.run(_run(args))
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(
        json.dumps(
            {k: v for k, v in report.items() if k != "memory"}
            | {
                "memory": {
                    name: {k: v for k, v in m.items() if k != "samples"}
                    for name, m in report["memory"].items()
                }
            },
            indent=1,
        )
    )
    grew = [name for name, m in report["memory"].items() if m["growth"] > args.max_growth]
    failed = report["failures"] or report["errors"].get("internal_error") or grew
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
