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
from voicewire.server.auth import ANONYMOUS_CALLER, Auth, Caller, key_id
from voicewire.server.config import ServerConfig
from voicewire.server.errors import ProtocolError
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
        "no credentials": ({}, "", "unauthorized", 4401, "no credentials"),
        "wrong key": ({"authorization": "Bearer sk-wrong"}, "", "unauthorized", 4401, "the API key is"),
        "bad origin": (
            {"authorization": f"Bearer {KEY}", "origin": "https://evil.example"},
            "",
            "forbidden_origin",
            4403,
            "origin",
        ),
        "forged token": ({}, "?token=abc.def.ghi", "unauthorized", 4401, "the token is"),
        "forged bearer token": (
            {"authorization": "Bearer abc.def.ghi"},
            "",
            "unauthorized",
            4401,
            "the token is",
        ),
    }
    for name, (headers, query, code, close, says) in cases.items():
        outcome, (error, close_code) = asyncio.run(_attempt(secured.url, headers=headers, query=query))
        assert outcome == "refused", name
        assert (error["type"], error["code"], error["fatal"], close_code) == ("error", code, True, close), (
            name
        )
        assert says in error["message"] and KEY not in error["message"], (name, error["message"])
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


def test_a_refusal_names_the_wrong_credential_and_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICEWIRE_API_KEYS", "sk-from-env")
    auth = Auth(ServerConfig(api_keys=(KEY,)))
    token = auth.mint(Caller("key-0000000000"))  # signed here, for a key that is not configured

    def refusal(credential: str | None = None, token: str | None = None, tokens_allowed: bool = True) -> str:
        headers = {"authorization": f"Bearer {credential}"} if credential else {}
        with pytest.raises(ProtocolError) as info:
            auth.identify(headers, token, tokens_allowed)
        assert info.value.code == "unauthorized"
        return info.value.message

    messages = {
        "wrong key": refusal("sk-test-124"),
        "wrong key, keys only": refusal("sk-wrong", tokens_allowed=False),
        "a key's prefix": refusal(KEY[:-1]),
        "forged bearer token": refusal("abc.def.ghi"),
        "forged token": refusal(token="abc.def.ghi"),
        "altered token": refusal(token=_mint_for(auth, KEY)[:-2] + "xx"),
        "unknown key's token": refusal(token=token),
        "token where a key is needed": refusal(_mint_for(auth, KEY), tokens_allowed=False),
    }
    assert messages["wrong key"] == messages["wrong key, keys only"] == messages["a key's prefix"]
    assert messages["wrong key"] == "the API key is not valid"
    assert messages["forged bearer token"] == messages["forged token"] == messages["altered token"]
    assert messages["forged token"].startswith("the token is not valid")
    assert messages["unknown key's token"] == "the token's key is no longer accepted"
    assert messages["token where a key is needed"].startswith("this needs an API key")
    for name, message in messages.items():
        assert "token" not in message if name.startswith(("wrong key", "a key")) else "token" in message, name
        assert KEY not in message and "sk-from-env" not in message and "sk-" not in message, name
    # Both keys still work, and so does a token minted for one.
    assert auth.identify({"authorization": "Bearer sk-from-env"}) == Caller(key_id("sk-from-env"))
    assert auth.identify({}, _mint_for(auth, KEY)) == auth.identify({"authorization": f"Bearer {KEY}"})
    monkeypatch.delenv("VOICEWIRE_API_KEYS")
    assert Auth(ServerConfig()).identify({}) == ANONYMOUS_CALLER  # no keys: everyone is one caller


def _mint_for(auth: Auth, key: str) -> str:
    return auth.mint(auth.identify({"authorization": f"Bearer {key}"}))
