"""API keys, browser tokens, the origin allow-list and session limits, on a real server."""

import asyncio
import contextlib
import time

import httpx
import msgpack
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.server.conftest import running_server
from voicewire.server.config import ServerConfig
from voicewire.server.wire import MSGPACK

KEY = "sk-test-123"
ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def secured(tiny_models):
    config = ServerConfig(api_keys=(KEY,), allowed_origins=(ORIGIN,), token_ttl_s=1.5, max_sessions_per_key=2)
    with running_server(tiny_models["custom_voice"], config) as running:
        yield running


async def _attempt(url: str, subprotocols=(MSGPACK,), headers=None, query: str = "") -> tuple[str, object]:
    """('ok', ready) once the socket works; ('refused', (error, close code)) when it is refused."""
    async with connect(
        f"{url}/v1/stream{query}", subprotocols=list(subprotocols), additional_headers=headers
    ) as ws:
        with contextlib.suppress(ConnectionClosed):  # a refused socket may be closed already
            await ws.send(msgpack.packb({"type": "start", "voice": {"speaker": "vivian"}}))
        first = msgpack.unpackb(await ws.recv())
        if first["type"] == "ready":
            assert ws.subprotocol == MSGPACK  # a token entry is never echoed
            return "ok", first
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        return "refused", (first, ws.close_code)


def _token(server) -> str:
    response = httpx.post(f"{server.http}/v1/tokens", headers={"authorization": f"Bearer {KEY}"}, timeout=10)
    assert response.status_code == 200
    return response.json()["token"]


def test_refusals(secured) -> None:
    cases = {
        "no credentials": ({}, "", "unauthorized", 4401),
        "wrong key": ({"authorization": "Bearer sk-wrong"}, "", "unauthorized", 4401),
        "bad origin": (
            {"authorization": f"Bearer {KEY}", "origin": "https://evil.example"},
            "",
            "forbidden_origin",
            4403,
        ),
        "forged token": ({}, "?token=abc.def.ghi", "unauthorized", 4401),
    }
    for name, (headers, query, code, close) in cases.items():
        outcome, (error, close_code) = asyncio.run(_attempt(secured.url, headers=headers, query=query))
        assert outcome == "refused", name
        assert (error["type"], error["code"], error["fatal"], close_code) == ("error", code, True, close), (
            name
        )
    assert secured.engine.live_streams == 0  # no engine work for any of them


def test_expired_token(secured) -> None:
    token = _token(secured)
    time.sleep(2.0)
    outcome, (error, _) = asyncio.run(_attempt(secured.url, query=f"?token={token}"))
    assert outcome == "refused" and error["code"] == "unauthorized" and "expired" in error["message"]


def test_each_valid_form_is_accepted(secured) -> None:
    forms = {
        "bearer key": dict(headers={"authorization": f"Bearer {KEY}"}),
        "key with an allowed origin": dict(headers={"authorization": f"Bearer {KEY}", "origin": ORIGIN}),
        "token in the query": dict(query=f"?token={_token(secured)}"),
        "token as a subprotocol entry": dict(subprotocols=(MSGPACK, f"voicewire.token.{_token(secured)}")),
        "token as a bearer": dict(headers={"authorization": f"Bearer {_token(secured)}", "origin": ORIGIN}),
    }
    for name, form in forms.items():
        outcome, ready = asyncio.run(_attempt(secured.url, **form))
        assert outcome == "ok", (name, ready)


def test_sessions_per_key_are_limited(secured) -> None:
    async def run():
        headers = {"authorization": f"Bearer {KEY}"}
        held = [
            await connect(f"{secured.url}/v1/stream", subprotocols=[MSGPACK], additional_headers=headers)
            for _ in range(2)
        ]
        for ws in held:
            await ws.send(msgpack.packb({"type": "ping"}))
            assert msgpack.unpackb(await ws.recv())["type"] == "pong"
        third = await _attempt(secured.url, headers=headers)
        for ws in held:
            await ws.close()
        await asyncio.sleep(0.3)
        again = await _attempt(secured.url, headers=headers)  # a slot is free again
        return third, again

    (outcome, (error, close)), (again, _) = asyncio.run(run())
    assert (outcome, error["code"], close) == ("refused", "too_many_sessions", 4429)
    assert again == "ok"


def test_http_needs_a_key_or_token(secured) -> None:
    speech = f"{secured.http}/v1/audio/speech"
    body = {"input": "Hi there.", "voice": "vivian"}
    assert httpx.post(speech, json=body, timeout=30).status_code == 401
    assert httpx.get(f"{secured.http}/v1/voices", timeout=10).status_code == 401
    refused = httpx.post(
        f"{secured.http}/v1/tokens", headers={"authorization": f"Bearer {_token(secured)}"}, timeout=10
    )
    assert (
        refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    )  # tokens mint nothing
    evil = httpx.get(
        f"{secured.http}/v1/voices",
        headers={"authorization": f"Bearer {KEY}", "origin": "https://evil.example"},
    )
    assert evil.status_code == 403
    ok = httpx.get(f"{secured.http}/v1/voices", headers={"authorization": f"Bearer {KEY}"}, timeout=10)
    assert ok.status_code == 200 and ok.json()["variant"] == "custom_voice"
    assert httpx.get(f"{secured.http}/health", timeout=10).status_code == 200  # liveness stays open
