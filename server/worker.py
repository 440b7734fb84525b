"""Server workers: with `server.workers` above 1, uvicorn runs that many processes, each serving its
share of the sockets (and encoding their Opus), all on the one engine process that `voicewire
serve` started. Each worker builds its app here, from what `voicewire serve` put in its environment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import signal

from starlette.applications import Starlette

from voicewire.engine.engine_process import EngineProcess
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


def create_worker_app() -> Starlette:
    """uvicorn's app factory in each worker process."""
    logging.basicConfig(level=int(os.environ.get(LOG_LEVEL, logging.INFO)), format=LOG_FORMAT)
    config = ServerConfig.from_yaml(None, **json.loads(os.environ[SERVER_CONFIG]))
    engine = EngineProcess.connect(
        os.environ[ENGINE_ADDRESS], bytes.fromhex(os.environ[ENGINE_KEY]), on_lost=stop_this_process
    )
    return create_app(engine, config, close_engine=True)
