import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import yaml

from voicewire.engine import Engine, EngineConfig
from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.server.app import BackgroundServer, create_app
from voicewire.server.config import ServerConfig


@dataclass
class RunningServer:
    url: str  # ws://127.0.0.1:PORT
    http: str  # http://127.0.0.1:PORT
    engine: "Engine | EngineProcess | RemoteEngine"
    config: ServerConfig


class RemoteEngine:
    """The engine of a server in another process, as far as tests look at it (GET /ready)."""

    def __init__(self, http: str) -> None:
        self.http = http

    @property
    def live_streams(self) -> int:
        with urllib.request.urlopen(self.http + "/ready", timeout=10) as response:
            return json.loads(response.read())["live_streams"]


@contextlib.contextmanager
def serving(engine: "Engine | EngineProcess", config: ServerConfig) -> Iterator[RunningServer]:
    """A real server on loopback for `engine`, stopped on exit."""
    runner = BackgroundServer(create_app(engine, config))
    port = runner.start()
    try:
        yield RunningServer(f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}", engine, config)
    finally:
        runner.stop()


@contextlib.contextmanager
def running_server(model, config: ServerConfig) -> Iterator[RunningServer]:
    """A real server for `model` with `config`, its engine in this process (closed on exit)."""
    with (
        Engine(model, EngineConfig(max_streams=8, kv_length=256)) as engine,
        serving(engine, config) as running,
    ):
        yield running


@contextlib.contextmanager
def process_server(folder: Path, config: ServerConfig) -> Iterator[RunningServer]:
    """A real server whose engine runs in its own process (as `voicewire serve` runs it)."""
    engine_config = EngineConfig(model=str(folder), max_streams=8, kv_length=256)
    with EngineProcess.start(engine_config) as engine, serving(engine, config) as running:
        yield running


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    config = ServerConfig(max_contexts=3, max_text_chars=500, max_message_bytes=4096, send_queue=4096)
    with running_server(tiny_models["custom_voice"], config) as running:
        yield running


@contextlib.contextmanager
def vllm_server(config: ServerConfig, folder: Path) -> Iterator[RunningServer]:
    """`voicewire serve --backend vllm --model tiny` in the vLLM virtualenv, on a free port."""
    from tests.vllm_env import vllm_python

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}
    server.update(host="127.0.0.1", port=port)
    profile = folder / "vllm-server.yaml"
    profile.write_text(yaml.safe_dump({"engine": {"max_streams": 8, "kv_length": 256}, "server": server}))
    command = [str(vllm_python().parent / "voicewire"), "serve", "--backend", "vllm", "--model", "tiny"]
    log = open(folder / "vllm-server.log", "w")
    process = subprocess.Popen([*command, "--config", str(profile)], stdout=log, stderr=subprocess.STDOUT)
    http = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, (
                f"the server exited: {(folder / 'vllm-server.log').read_text()[-4000:]}"
            )
            assert time.monotonic() < deadline, "the vllm server did not become ready"
            try:
                with urllib.request.urlopen(http + "/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield RunningServer(f"ws://127.0.0.1:{port}", http, RemoteEngine(http), config)
    finally:
        engine_processes = [  # vLLM's engine core and worker name themselves VLLM::...
            pid for pid in _descendants(process.pid) if b"VLLM::" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    time.sleep(1)
    outlived = [pid for pid in engine_processes if Path(f"/proc/{pid}").exists()]
    for pid in outlived:
        os.kill(pid, signal.SIGKILL)
    assert engine_processes and not outlived, f"vLLM processes {outlived} outlived the stopped server"


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found
