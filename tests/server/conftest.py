import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from voicewire.engine import Engine, EngineConfig
from voicewire.server.app import create_app
from voicewire.server.config import ServerConfig


@dataclass
class RunningServer:
    url: str  # ws://127.0.0.1:PORT
    http: str  # http://127.0.0.1:PORT
    engine: Engine
    config: ServerConfig


class _Uvicorn:
    """A real uvicorn server on 127.0.0.1, on a free port, in a thread."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> int:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextlib.contextmanager
def running_server(model, config: ServerConfig) -> Iterator[RunningServer]:
    """A real server for `model` with `config`, stopped (and its engine closed) on exit."""
    with Engine(model, EngineConfig(max_streams=8, kv_length=256)) as engine:
        runner = _Uvicorn(create_app(engine, config))
        port = runner.start()
        try:
            yield RunningServer(f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}", engine, config)
        finally:
            runner.stop()


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    config = ServerConfig(max_contexts=3, max_text_chars=500, max_message_bytes=4096, send_queue=4096)
    with running_server(tiny_models["custom_voice"], config) as running:
        yield running
