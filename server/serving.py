"""How `voicewire serve` runs its processes. The engine runs in a process of its own (restarted by
its `RestartPolicy`), so sockets and Opus never hold its interpreter. With `server.workers: 1`
this process serves the sockets; with more, that many worker processes each serve their share of
them (and encode their Opus), all on the one engine process. Each worker builds its app in
`create_worker_app`, from what `serve` put in its environment. On Linux `serve_workers` gives
each worker a listening socket of its own on the one port; elsewhere uvicorn's workers share one.

The CLI imports this module before `serve` names its metrics folder, and prometheus-client picks
its multiprocess mode when it is first imported (server/metrics_dir.py). So nothing that imports
prometheus-client (voicewire.engine, server.app) is imported at the top here, only where it is used.
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
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voicewire.server.config import LOG_FORMAT, ServerConfig

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from voicewire.engine.config import EngineConfig
    from voicewire.engine.runtime.engine_process import EngineProcess

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
# `serve --config auto` (what `make serve` runs): the GPU profile with DEFAULT_MODEL where it can
# run, else the CPU profile with the built-in tiny checkpoint.
AUTO_PROFILE = Path("auto")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"

ENGINE_ADDRESS = "VOICEWIRE_ENGINE_ADDRESS"
ENGINE_KEY = "VOICEWIRE_ENGINE_KEY"
SERVER_CONFIG = "VOICEWIRE_SERVER_CONFIG"
LOG_LEVEL = "VOICEWIRE_LOG_LEVEL"
WORKER_APP = "voicewire.server.serving:create_worker_app"  # uvicorn imports each worker's app by name
CRASH_LOOP_S = 10.0  # a worker that crashes sooner than this after its start stops the server
STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)  # exit codes of a worker that was asked to stop

log = logging.getLogger(__name__)


def choose_profile(cuda: bool, hub: bool) -> tuple[Path, str]:
    """The profile a first run serves, given whether a CUDA GPU is usable and DEFAULT_MODEL is in
    reach (cached, or on the hub), and why, as one line for the console."""
    if cuda and hub:
        return CONFIGS / "gpu.yaml", (
            f"a CUDA GPU and {DEFAULT_MODEL} in reach: serving it with configs/gpu.yaml "
            "(a first run downloads it into the Hugging Face cache)"
        )
    missing = "no CUDA GPU" if not cuda else f"{DEFAULT_MODEL} is neither cached nor reachable on the hub"
    return CONFIGS / "cpu.yaml", (
        f"{missing}: serving the built-in tiny checkpoint (configs/cpu.yaml); its random weights make "
        "noise, not words"
    )


def _model_in_reach(repo: str) -> bool:
    from huggingface_hub import HfApi, snapshot_download

    # Whatever stops either (no cache entry, offline mode, no route, a proxy's refusal) means the
    # same here: not in reach, so serve the tiny checkpoint rather than fail a first run.
    try:
        snapshot_download(repo_id=repo, local_files_only=True)
        return True
    except Exception:
        pass
    try:
        HfApi().model_info(repo, timeout=5)
        return True
    except Exception:
        return False


def cuda_available() -> bool:
    """Whether PyTorch here sees a CUDA GPU, asked in a child interpreter: imported here, torch (and
    CUDA's driver, once asked) would stay for `serve`'s life, which needs neither; the engine
    process loads them."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(int(torch.cuda.is_available()))"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        log.warning("could not ask PyTorch for a CUDA GPU: %s", probe.stderr.strip()[-500:])
        return False
    return probe.stdout.strip() == "1"


def resolve_auto_profile(config: Path | None) -> Path | None:
    """`--config auto` made a profile's path (and said why); any other value as it is."""
    if config != AUTO_PROFILE:
        return config
    cuda = cuda_available()
    profile, why = choose_profile(cuda, cuda and _model_in_reach(DEFAULT_MODEL))  # no network without a GPU
    log.info("%s", why)
    return profile


def load_configs(
    profile: Path | None,
    *,
    model: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    backend: str | None = None,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    data_dir: Path | None = None,
) -> tuple[EngineConfig, ServerConfig]:
    """The engine's and the server's settings: `profile` (`auto` resolved) with the given values
    over it (None: not given). Without a profile the engine serves `model`, else DEFAULT_MODEL."""
    from voicewire.engine import EngineConfig

    profile = resolve_auto_profile(profile)
    overrides = {"model": model, "device": device, "dtype": dtype, "backend": backend}
    if profile:
        engine_config = EngineConfig.from_yaml(profile, **overrides)
    else:
        engine_config = EngineConfig.from_dict(
            {k: v for k, v in overrides.items() if v is not None} | {"model": model or DEFAULT_MODEL}
        )
    server_config = ServerConfig.from_yaml(profile, host=host, port=port, workers=workers, data_dir=data_dir)
    return engine_config, server_config


def serve(engine_config: EngineConfig, server_config: ServerConfig) -> int:
    """Serve until a signal or the engine process's end; the exit status (1: the engine process
    exited). Raises ValueError before anything loads for a server it refuses to start: off
    loopback without API keys, or on a port it cannot listen on."""
    import uvicorn

    from voicewire.engine.runtime.engine_process import EngineProcess, RestartPolicy
    from voicewire.server.config import uvicorn_options

    if not (server_config.api_keys or os.environ.get("VOICEWIRE_API_KEYS")) and not _is_loopback(
        server_config.host
    ):
        raise ValueError(
            f"refusing to serve on {server_config.host} without API keys: set server.api_keys in the config "
            "or VOICEWIRE_API_KEYS, or listen on 127.0.0.1"
        )
    _check_port(server_config.host, server_config.port)  # before minutes of loading and warm-up
    restarts = RestartPolicy(server_config.engine_restarts, server_config.engine_restart_window_s)
    engine = EngineProcess.start(engine_config, on_lost=stop_this_process, restarts=restarts)
    try:
        options: dict[str, Any] = {
            "host": server_config.host,
            "port": server_config.port,
            "log_level": "info",
        }
        options |= uvicorn_options(server_config)
        log.info(
            "serving ws://%s:%d/v1/stream with %d worker(s)",
            server_config.host,
            server_config.port,
            server_config.workers,
        )
        with _stopped_by_signal():
            if server_config.workers == 1:
                uvicorn.run(serving_app(engine, server_config), **options)
            else:
                os.environ.update(worker_environment(engine, server_config))
                if can_balance_connections():
                    serve_workers(options, server_config.workers)
                else:
                    uvicorn.run(WORKER_APP, factory=True, workers=server_config.workers, **options)
        if engine.exited:  # it stopped because its engine did: say so to the supervisor
            log.error("the server stopped because its engine process exited")
            return 1
    finally:
        engine.close()
    return 0


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_port(host: str, port: int) -> None:
    """Raises ValueError when `host:port` cannot be listened on (another server holds it)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ValueError(f"cannot listen on {host}: {exc.strerror}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port whose last connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ValueError(
                f"cannot listen on {host}:{port}: {exc.strerror} (another server? --port picks another)"
            ) from None


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


@contextlib.contextmanager
def _stopped_by_signal() -> Iterator[None]:
    """uvicorn stops gracefully on SIGTERM or SIGINT (Ctrl-C), then raises the signal again for
    the handler it found. The default ones would kill the process or raise KeyboardInterrupt
    there, before the engine process is closed and the metrics folder removed; this returns to
    the caller instead."""
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, _raise_stop) for signum in stops}
    try:
        yield
    except _Stop as stop:
        log.info("stopped by %s", stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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
    from voicewire.engine.runtime.gc_pauses import freeze_startup_heap
    from voicewire.engine.runtime.metrics import ProcessUsage
    from voicewire.server.app import create_app

    app = create_app(engine, config, close_engine=True)
    ProcessUsage("server", app.state.metrics.registry).start()
    freeze_startup_heap()
    return app


def create_worker_app() -> Starlette:
    """uvicorn's app factory in each worker process."""
    from voicewire.engine.runtime.engine_process import EngineProcess

    logging.basicConfig(level=int(os.environ.get(LOG_LEVEL, logging.INFO)), format=LOG_FORMAT)
    config = ServerConfig.from_yaml(None, **json.loads(os.environ[SERVER_CONFIG]))
    engine = EngineProcess.connect(
        os.environ[ENGINE_ADDRESS], bytes.fromhex(os.environ[ENGINE_KEY]), on_lost=stop_this_process
    )
    return serving_app(engine, config)


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
