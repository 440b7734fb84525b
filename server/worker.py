"""Server workers: with `server.workers` above 1, that many processes each serve their share of
the sockets (and encode their Opus), all on the one engine process that `voicewire serve`
started. Each worker builds its app here, from what `voicewire serve` put in its environment. On
Linux `serve_workers` gives each worker a listening socket of its own on the one port; elsewhere
uvicorn's workers share one socket.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import time

from starlette.applications import Starlette

from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.engine.runtime.gc_pauses import freeze_startup_heap
from voicewire.engine.runtime.metrics import ProcessUsage
from voicewire.server.app import create_app
from voicewire.server.config import LOG_FORMAT, ServerConfig

ENGINE_ADDRESS = "VOICEWIRE_ENGINE_ADDRESS"
ENGINE_KEY = "VOICEWIRE_ENGINE_KEY"
SERVER_CONFIG = "VOICEWIRE_SERVER_CONFIG"
LOG_LEVEL = "VOICEWIRE_LOG_LEVEL"

log = logging.getLogger(__name__)


def worker_environment(engine: EngineProcess, config: ServerConfig) -> dict[str, str]:
    """What a worker needs: where the engine listens, its key, and the server settings, with one
    token secret for all (a token minted by one worker must open a socket on any)."""
    if config.token_secret is None:
        config = dataclasses.replace(config, token_secret=secrets.token_hex(32))
    return {
        ENGINE_ADDRESS: engine.address,
        ENGINE_KEY: engine.authkey.hex(),
        SERVER_CONFIG: json.dumps(dataclasses.asdict(config)),
        LOG_LEVEL: str(logging.getLogger().getEffectiveLevel()),
    }


def stop_this_process() -> None:
    """The engine process went away unasked: stop serving (uvicorn shuts down on SIGTERM), so that
    nothing is left listening that can only fail, and a supervisor restarts the whole server."""
    log.error("the engine process is gone: stopping server process %d", os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


def serving_app(engine: EngineProcess, config: ServerConfig) -> Starlette:
    """The app of a process that serves sockets for `voicewire serve` (a worker, or `serve` itself
    with one): it reports its CPU time, and its start-up heap is frozen once it is built."""
    app = create_app(engine, config, close_engine=True)
    ProcessUsage("server", app.state.metrics.registry).start()
    freeze_startup_heap()
    return app


def create_worker_app() -> Starlette:
    """uvicorn's app factory in each worker process."""
    logging.basicConfig(level=int(os.environ.get(LOG_LEVEL, logging.INFO)), format=LOG_FORMAT)
    config = ServerConfig.from_yaml(None, **json.loads(os.environ[SERVER_CONFIG]))
    engine = EngineProcess.connect(
        os.environ[ENGINE_ADDRESS], bytes.fromhex(os.environ[ENGINE_KEY]), on_lost=stop_this_process
    )
    return serving_app(engine, config)


WORKER_APP = "voicewire.server.worker:create_worker_app"
CRASH_LOOP_S = 10.0  # a worker that crashes sooner than this after its start stops the server
STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)  # exit codes of a worker that was asked to stop


def can_balance_connections() -> bool:
    """Whether the kernel can spread connections over one listening socket per worker
    (SO_REUSEPORT with balancing: Linux). Elsewhere uvicorn's shared socket serves."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _bound_socket(host: str, port: int) -> socket.socket:
    # The family as uvicorn picks it, so "localhost" means 127.0.0.1 here too.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _run_worker(options: dict) -> None:
    """One worker process: its own listening socket on the shared port, uvicorn serving the app
    that `create_worker_app` builds. uvicorn stops gracefully on SIGTERM or SIGINT."""
    import uvicorn

    sock = _bound_socket(options["host"], options["port"])
    config = uvicorn.Config(WORKER_APP, factory=True, **options)
    sock.listen(config.backlog)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reaches every process of the group
        uvicorn.Server(config).run(sockets=[sock])


def serve_workers(options: dict, workers: int) -> None:
    """Run `workers` server processes on options["port"], each with a listening socket of its own
    (SO_REUSEPORT), so that the kernel spreads connections over them by their addresses. With
    uvicorn's one shared socket the worker that woke first accepted a whole burst (asyncio and
    uvloop accept until the queue is empty): at 256 streams one worker took far more than its
    share. Returns when a worker was stopped (by a signal, or itself on losing the engine) or a
    signal's handler raises here; then stops the rest. A crashed worker is replaced."""
    # Held, not listening, for the life of the server: it fixes a port 0 to one number for all
    # workers and keeps the port ours while a worker restarts.
    with _bound_socket(options["host"], options["port"]) as reserved:
        options = options | {"port": reserved.getsockname()[1]}
        context = multiprocessing.get_context("spawn")

        def start() -> tuple[multiprocessing.process.BaseProcess, float]:
            process = context.Process(target=_run_worker, args=(options,), name="voicewire-worker")
            process.start()
            return process, time.monotonic()

        running = [start() for _ in range(workers)]
        try:
            while True:
                multiprocessing.connection.wait([process.sentinel for process, _ in running])
                for i, (process, started) in enumerate(running):
                    if process.is_alive():
                        continue
                    if process.exitcode in STOPPED:
                        log.info("server worker %d stopped: stopping the others", process.pid)
                        return
                    if time.monotonic() - started < CRASH_LOOP_S:
                        raise RuntimeError(
                            f"server worker {process.pid} exited {process.exitcode} within "
                            f"{CRASH_LOOP_S:.0f} s of its start; see the log above"
                        )
                    log.warning("server worker %d exited %s: starting another", process.pid, process.exitcode)
                    running[i] = start()
        finally:
            for process, _ in running:
                if process.is_alive():
                    process.terminate()  # SIGTERM: uvicorn closes its sessions and stops
            for process, _ in running:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
                    process.join()
