"""The Starlette app: the /v1/stream WebSocket and the health endpoints, around one Engine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from voicewire.engine import EngineError, StreamOptions
from voicewire.engine.api import EngineClient
from voicewire.server import elevenlabs as el
from voicewire.server import protocol as p
from voicewire.server.auth import Auth, Caller, split_subprotocols
from voicewire.server.codec_pool import CodecPool
from voicewire.server.config import ServerConfig, uvicorn_options
from voicewire.server.errors import HTTP_STATUS, ProtocolError
from voicewire.server.metrics import Metrics
from voicewire.server.session import Session
from voicewire.server.speech_api import speech_endpoints
from voicewire.server.voices_api import VoiceLibrary
from voicewire.server.wire import JSON, SUBPROTOCOLS, Codec, Dialect

log = logging.getLogger(__name__)

WEB = Path(__file__).resolve().parents[1] / "web"


def create_app(
    engine: EngineClient,
    config: ServerConfig | None = None,
    close_engine: bool = False,
) -> Starlette:
    """An app serving `engine`. The caller owns the engine, unless `close_engine`: then the app closes
    it when it shuts down (`voicewire serve`). Stored voices live in `config.data_dir` (opened on
    first use)."""
    config = config or ServerConfig()
    metrics = Metrics(engine.registry)
    executor = CodecPool(config.codec_thread_count, nice=config.codec_nice, on_job=metrics.codec_job)
    auth = Auth(config)
    library = VoiceLibrary(engine, config.voice_folder, config.voices, metrics, shared=auth.open)
    speech, voices = speech_endpoints(engine, metrics, library)
    if auth.open:
        log.warning("no API keys configured: the server is open; the CLI keeps it on loopback")
    middleware = []
    if config.allowed_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.allowed_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["authorization", "content-type"],
            )
        )

    async def stream(websocket: WebSocket) -> None:
        offered, token = split_subprotocols(websocket.scope.get("subprotocols") or [])
        chosen = next((s for s in offered if s in SUBPROTOCOLS), None)
        if offered and chosen is None:
            # Not our protocol: refuse the handshake (HTTP 403) rather than guess.
            await websocket.close(code=1002)
            return
        await websocket.accept(subprotocol=chosen)
        codec = Codec(chosen or JSON)

        async def identify() -> Caller:
            return auth.identify(websocket.headers, token or websocket.query_params.get("token"))

        await serve_session(websocket, codec, codec.subprotocol, identify, config)

    async def elevenlabs(websocket: WebSocket) -> None:
        """ElevenLabs' stream-input and multi-stream-input sockets (server/elevenlabs.py)."""
        await websocket.accept()
        multi = websocket.url.path.endswith(el.MULTI)
        try:
            query = el.Query.parse(websocket.query_params)
        except ProtocolError as error:  # before there is a session to say it
            await websocket.send_text(el.refusal(error, multi))
            await websocket.close(code=el.CLOSE)
            return
        dialect = el.ElevenLabsDialect(websocket.path_params["voice_id"], query, multi)

        async def identify() -> Caller:
            return auth.identify(await el.credentials(websocket, dialect, auth.open))

        # ElevenLabs closes a socket that sends no text for `inactivity_timeout` seconds.
        timed = dataclasses.replace(config, idle_timeout_s=query.inactivity_s)
        await serve_session(
            websocket, dialect, f"elevenlabs {el.MULTI if multi else el.SINGLE}", identify, timed
        )

    async def serve_session(
        websocket: WebSocket,
        dialect: Dialect,
        name: str,
        identify: Callable[[], Awaitable[Caller]],
        session_config: ServerConfig,
    ) -> None:
        """An accepted socket: who calls and whether the limits let them in, then its session."""
        try:
            caller = await identify()
            auth.acquire(caller)
        except ProtocolError as error:
            log.info("refused a socket: %s", error)
            metrics.errors.labels(error.code).inc()
            for refusal in dialect.write(p.Error(code=error.code, message=error.message, fatal=True)):
                await (
                    websocket.send_bytes(refusal)
                    if isinstance(refusal, bytes)
                    else websocket.send_text(refusal)
                )
            await websocket.close(code=dialect.close_code(error))
            return
        try:
            session = Session(websocket, engine, dialect, session_config, executor, metrics, library, caller)
            log.info("session %s opened (%s, %s)", session.id, name, caller.identity)
            metrics.sessions_opened.labels(str(os.getpid())).inc()
            await session.run()
            log.info("session %s closed", session.id)
        finally:
            auth.release(caller)

    def guarded(
        endpoint: Callable[[Request, Caller], Awaitable[Response]], tokens_allowed: bool = True
    ) -> Callable[[Request], Awaitable[Response]]:
        """An HTTP endpoint behind the same checks, answering refusals with 4xx; it is given the caller."""

        async def checked(request: Request) -> Response:
            try:
                caller = auth.identify(request.headers, tokens_allowed=tokens_allowed)
            except ProtocolError as error:
                metrics.errors.labels(error.code).inc()
                body = {
                    "error": {"message": error.message, "type": "authentication_error", "code": error.code}
                }
                return JSONResponse(body, HTTP_STATUS[error.code])
            return await endpoint(request, caller)

        return checked

    async def tokens(request: Request, caller: Caller) -> Response:
        token = auth.mint(caller)
        return JSONResponse({"token": token, "expires_in": config.token_ttl_s, "token_type": "voicewire"})

    async def voice_list(request: Request, caller: Caller) -> Response:
        return await (
            library.create(request, caller) if request.method == "POST" else voices(request, caller)
        )

    async def voice_one(request: Request, caller: Caller) -> Response:
        voice_id = request.path_params["voice_id"]
        return await (library.delete if request.method == "DELETE" else library.get)(voice_id, caller)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> JSONResponse:
        if not engine.healthy:
            return JSONResponse(
                {"status": "engine stopped or restarting; see the server log"}, status_code=503
            )
        if app.state.warmed != engine.restarts:  # not warm (a failed warm-up), or a new engine process
            if app.state.warming is None or app.state.warming.done():
                app.state.warming = asyncio.create_task(warm_up())
            return JSONResponse({"status": "warming up"}, status_code=503)
        return JSONResponse(
            {
                "status": "ready",
                "model": engine.info.folder,
                "random_weights": engine.info.random_weights,
                "live_streams": engine.live_streams,
            },
        )

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def warm_up() -> None:
        restarts = engine.restarts
        try:
            await _warm_up(engine)
        except EngineError as exc:  # the engine went away meanwhile: /ready warms the next one
            log.warning("the warm-up failed (%s); /ready warms the engine once it is back", exc)
            return
        app.state.warmed = restarts  # the engine that was warmed, by its restart count

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await warm_up()
        yield
        executor.shutdown(wait=False, cancel_futures=True)
        library.store.close()
        if close_engine:
            await asyncio.to_thread(engine.close)

    app = Starlette(
        routes=[
            WebSocketRoute("/v1/stream", stream),
            WebSocketRoute(f"/v1/text-to-speech/{{voice_id}}/{el.SINGLE}", elevenlabs),
            WebSocketRoute(f"/v1/text-to-speech/{{voice_id}}/{el.MULTI}", elevenlabs),
            Route("/health", health),
            Route("/ready", ready),
            Route("/metrics", metrics_endpoint),
            Route("/v1/audio/speech", guarded(speech), methods=["POST"]),
            Route("/v1/voices", guarded(voice_list), methods=["GET", "POST"]),
            Route("/v1/voices/{voice_id}", guarded(voice_one), methods=["GET", "DELETE"]),
            Route("/v1/tokens", guarded(tokens, tokens_allowed=False), methods=["POST"]),
            # The player (/player.js) and the demo page (/), last so they shadow no route.
            Mount("/", app=StaticFiles(directory=WEB, html=True), name="web"),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.engine = engine
    app.state.config = config
    app.state.warmed = None
    app.state.warming = None
    app.state.metrics = metrics
    app.state.auth = auth
    app.state.voices = library
    return app


async def _warm_up(engine: EngineClient) -> None:
    """Short streams through every stage, one alone and then three at once, so the first clients do
    not pay for first calls (on CUDA: the fused kernels compile per shape class, batch 1 or more)."""
    info = engine.info
    fields: dict = {}
    if info.variant == "custom_voice":
        fields["speaker"] = info.speakers[0]
    elif info.variant == "voice_design":
        fields["instruct"] = "A clear voice."
    else:
        fields["speaker_embedding"] = [0.0] * info.speaker_embedding_size
    voice = await engine.voice(**fields)

    async def one() -> str:
        stream = engine.open_stream(voice, StreamOptions(greedy=True, max_frames=4))
        stream.push_text("Warming up.")
        stream.end()
        async for _ in stream:
            pass
        return (await stream.wait()).reason

    started = time.monotonic()
    reasons = [await one()]
    reasons += await asyncio.gather(*(one() for _ in range(min(3, engine.config.max_streams))))
    ended = (
        "each ended at its frame cap" if set(reasons) == {"max_frames"} else f"ended by {', '.join(reasons)}"
    )
    log.info(
        "the engine is warm: %d short streams in %.1f s, %s", len(reasons), time.monotonic() - started, ended
    )


class BackgroundServer:
    """uvicorn serving `app` on 127.0.0.1 (a free port) in a thread: for benchmarks and tests."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1") -> None:
        import threading

        import uvicorn

        options = uvicorn_options(app.state.config)
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning", **options))
        self.thread = threading.Thread(target=self.server.run, name="voicewire-uvicorn", daemon=True)
        self.port = 0

    def start(self, timeout: float = 60.0) -> int:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self.port

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
