import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from voicewire.engine import Engine, EngineConfig
from voicewire.server.app import BackgroundServer, create_app
from voicewire.server.config import ServerConfig


@dataclass
class RunningServer:
    url: str  # ws://127.0.0.1:PORT
    http: str  # http://127.0.0.1:PORT
    engine: Engine
    config: ServerConfig


@contextlib.contextmanager
def running_server(model, config: ServerConfig) -> Iterator[RunningServer]:
    """A real server for `model` with `config`, stopped (and its engine closed) on exit."""
    with Engine(model, EngineConfig(max_streams=8, kv_length=256)) as engine:
        runner = BackgroundServer(create_app(engine, config))
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
