"""The Starlette app: the /v1/stream WebSocket and the health endpoints, around one Engine."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from voicewire.engine import Engine, StreamOptions
from voicewire.server.config import ServerConfig
from voicewire.server.metrics import Metrics
from voicewire.server.session import Session
from voicewire.server.speech_api import speech_endpoints
from voicewire.server.wire import JSON, SUBPROTOCOLS, Codec

log = logging.getLogger(__name__)


def create_app(engine: Engine, config: ServerConfig | None = None) -> Starlette:
    """An app serving `engine`; the caller owns the engine (and closes it)."""
    config = config or ServerConfig()
    executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="voicewire-codec")
    metrics = Metrics()
    speech, voices = speech_endpoints(engine, metrics)

    async def stream(websocket: WebSocket) -> None:
        offered = websocket.scope.get("subprotocols") or []
        chosen = next((s for s in offered if s in SUBPROTOCOLS), None)
        if offered and chosen is None:
            # Not our protocol: refuse the handshake (HTTP 403) rather than guess.
            await websocket.close(code=1002)
            return
        await websocket.accept(subprotocol=chosen)
        session = Session(websocket, engine, Codec(chosen or JSON), config, executor, metrics)
        log.info("session %s opened (%s)", session.id, session.codec.subprotocol)
        await session.run()
        log.info("session %s closed", session.id)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> JSONResponse:
        if not app.state.warm:
            return JSONResponse({"status": "warming up"}, status_code=503)
        return JSONResponse(
            {"status": "ready", "model": str(engine.model.folder), "live_streams": engine.live_streams},
        )

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await _warm_up(engine)
        app.state.warm = True
        yield
        executor.shutdown(wait=False, cancel_futures=True)

    app = Starlette(
        routes=[
            WebSocketRoute("/v1/stream", stream),
            Route("/health", health),
            Route("/ready", ready),
            Route("/metrics", metrics_endpoint),
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/v1/voices", voices),
        ],
        lifespan=lifespan,
    )
    app.state.engine = engine
    app.state.config = config
    app.state.warm = False
    app.state.metrics = metrics
    return app


async def _warm_up(engine: Engine) -> None:
    """One short stream through every stage, so the first client does not pay for first calls."""
    model = engine.model
    fields: dict = {}
    if model.variant == "custom_voice":
        fields["speaker"] = sorted(model.talker.cfg.speakers)[0]
    elif model.variant == "voice_design":
        fields["instruct"] = "A clear voice."
    else:
        fields["speaker_embedding"] = [0.0] * model.talker.cfg.decoder.hidden_size
    stream = engine.open_stream(engine.voice(**fields), StreamOptions(greedy=True, max_frames=4))
    stream.push_text("Warming up.")
    stream.end()
    async for _ in stream:
        pass
    log.info("engine warm: %s", (await stream.wait()).reason)
