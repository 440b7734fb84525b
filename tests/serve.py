"""A real `voicewire serve` in its own process group on a free loopback port, for tests that drive
the server as users do (plugins in other virtualenvs, crashes, restarts)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass
class Served:
    process: subprocess.Popen
    port: int

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free now (one server per GPU takes base + i)."""
    while True:
        base = free_port()
        try:
            with contextlib.ExitStack() as held:
                for port in range(base + 1, base + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
        except OSError:
            continue
        return base


@contextlib.contextmanager
def voicewire_serve(
    *args: str, log: Path, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """`voicewire serve ARGS --port PORT` (a free one by default), ready (GET /ready answers 200)
    when entered; SIGTERM to its whole process group on exit (SIGKILL after a minute)."""
    port = port or free_port()
    command = [str(Path(sys.executable).parent / "voicewire"), "serve", *args, "--port", str(port)]
    with open(log, "a") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    served = Served(process, port)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not become ready"
            with contextlib.suppress(OSError, httpx.HTTPError):
                if httpx.get(served.http + "/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
