"""ElevenLabs' stream-input and multi-stream-input sockets on a real server (tiny checkpoint, CPU),
driven with plain JSON frames as that API documents them: the audio is protocol v1's for the same
text, voice and seed, alignment spells the text, close_context finishes or cancels, and errors
come in that API's shape with its close codes. (tests/integrations/test_elevenlabs_clients.py
drives the real clients.)"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.server.conftest import RunningServer, running_server
from tests.v1_reference import assert_same_start, v1_pcm16
from voicewire.client import Client
from voicewire.server.config import ServerConfig

KEY = "el-test-key"
SEED = 77
PIECES = ["Hello there. ", "How are ", "you today?"]


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    with running_server(tiny_models["custom_voice"], ServerConfig(api_keys=(KEY,))) as running:
        yield running


def _url(server: RunningServer, path: str, **query: Any) -> str:
    query = {"model_id": "eleven_flash_v2_5", "output_format": "pcm_24000", **query}
    return f"{server.url}/v1/text-to-speech/vivian/{path}?" + "&".join(f"{k}={v}" for k, v in query.items())


def _open(url: str, key: str | None = KEY) -> connect:
    """`async with _open(...) as ws`: the socket is closed (and waited for) on the way out."""
    return connect(url, additional_headers={"xi-api-key": key} if key else None)


async def _until_final(ws: ClientConnection, context: str | None = None) -> list[dict]:
    """Every message up to `context`'s isFinal (stream-input: the one isFinal)."""
    seen = []
    while True:
        message = json.loads(await ws.recv())
        seen.append(message)
        if message.get("isFinal") and message.get("contextId") == context:
            return seen


async def _last_before_close(ws: ClientConnection) -> tuple[dict, int]:
    """The last message before the server closed the socket, and its close code."""
    message: dict = {}
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            message = json.loads(await ws.recv())
    assert closed.value.rcvd is not None
    return message, closed.value.rcvd.code


def _pcm(messages: list[dict], context: str | None = None) -> np.ndarray:
    data = b"".join(
        base64.b64decode(m["audio"]) for m in messages if m.get("audio") and m.get("contextId") == context
    )
    return np.frombuffer(data, "<i2")


def _alignment(messages: list[dict]) -> tuple[str, list[list[int]]]:
    chars, starts = [], []
    for message in messages:
        if message.get("alignment"):
            assert message["normalizedAlignment"] == message["alignment"]
            chars += message["alignment"]["chars"]
            starts.append(message["alignment"]["charStartTimesMs"])
    return "".join(chars), starts


def test_a_context_speaks_v1s_audio_with_alignment_and_finishes_on_close(server) -> None:
    async def run() -> list[dict]:
        async with _open(_url(server, "multi-stream-input", seed=SEED)) as ws:
            await ws.send(json.dumps({"text": " ", "context_id": "a", "voice_settings": {"stability": 0.5}}))
            for piece in PIECES:
                await ws.send(json.dumps({"text": piece, "context_id": "a"}))
            await ws.send(json.dumps({"text": "", "context_id": "a"}))  # a keep-alive: nothing ends
            await ws.send(json.dumps({"context_id": "a", "flush": True}))
            await ws.send(json.dumps({"context_id": "a", "close_context": True}))
            seen = await _until_final(ws, "a")
            await ws.send(json.dumps({"close_socket": True}))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        return seen

    seen = asyncio.run(run())
    text = "".join(PIECES)
    expected = v1_pcm16(server.url, text, speaker="vivian", rate=24000, api_key=KEY, sampling={"seed": SEED})
    assert_same_start(_pcm(seen, "a"), expected, more_than=24000)  # over a second of it
    assert seen[-1] == {"isFinal": True, "contextId": "a"}  # no audio in the final message
    assert all(m["isFinal"] is False for m in seen[:-1])
    spelled, starts = _alignment(seen)
    assert spelled == text.strip()  # every character once, words spaced as sent
    assert all(s == sorted(s) and s[0] >= 0 for s in starts)
    for message in seen:  # each message's characters run to its end: added up, they keep pace
        if message.get("audio"):
            alignment, ms = message["alignment"], len(base64.b64decode(message["audio"])) // 2 / 24
            assert alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1] == round(ms)


def test_close_context_without_a_flush_cancels_it_and_another_goes_on(server) -> None:
    async def run() -> list[dict]:
        async with _open(_url(server, "multi-stream-input", auto_mode="true")) as ws:
            for context in ("cut", "kept"):
                await ws.send(
                    json.dumps(
                        {"text": "This goes on for a while, sentence after sentence.", "context_id": context}
                    )
                )
            while not (message := json.loads(await ws.recv())).get("audio") or message["contextId"] != "cut":
                pass
            await ws.send(json.dumps({"context_id": "cut", "close_context": True}))  # a barge-in
            await ws.send(json.dumps({"text": "", "context_id": "kept", "flush": True}))
            await ws.send(json.dumps({"context_id": "kept", "close_context": True}))
            seen = await _until_final(ws, "kept")
            await ws.close()
        return seen

    seen = asyncio.run(run())
    final = next(i for i, m in enumerate(seen) if m.get("isFinal") and m["contextId"] == "cut")
    assert not any(m.get("audio") for m in seen[final:] if m.get("contextId") == "cut")
    assert _pcm(seen, "kept").size > 24000  # the other context spoke on to its end


def test_stream_input_ends_on_empty_text_and_closes(server) -> None:
    async def run() -> tuple[list[dict], int]:
        async with _open(_url(server, "stream-input", output_format="ulaw_8000")) as ws:
            await ws.send(
                json.dumps(
                    {
                        "text": " ",
                        "voice_settings": None,
                        "generation_config": {"chunk_length_schedule": [50]},
                    }
                )
            )
            await ws.send(json.dumps({"text": "Hello there, ", "try_trigger_generation": True}))
            await ws.send(json.dumps({"text": ""}))
            seen = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    seen.append(json.loads(await ws.recv()))
        assert closed.value.rcvd is not None
        return seen, closed.value.rcvd.code

    seen, code = asyncio.run(run())
    assert code == 1000
    assert seen[-1] == {"isFinal": True, "audio": None, "alignment": None, "normalizedAlignment": None}
    assert (
        "contextId" not in seen[0]
        and sum(len(base64.b64decode(m["audio"])) for m in seen if m.get("audio")) > 8000
    )


@pytest.mark.parametrize("how", ["first message", "query"])
def test_the_key_may_come_in_the_first_message_or_the_query(server, how: str) -> None:
    async def run() -> dict:
        query = {"xi_api_key": KEY} if how == "query" else {}
        first = {"text": " "} if how == "query" else {"text": " ", "xi_api_key": KEY}
        async with _open(_url(server, "stream-input", **query), key=None) as ws:
            await ws.send(json.dumps(first))
            await ws.send(json.dumps({"text": "Hi. "}))
            await ws.send(json.dumps({"text": ""}))
            seen = await _until_final(ws)
        return seen[-1]

    assert asyncio.run(run())["isFinal"] is True


@pytest.mark.parametrize(
    ("key", "query", "error"),
    [
        ("wrong", {}, "auth_error"),
        (None, {}, "auth_error"),
        (KEY, {"output_format": "flac_44100"}, "invalid_format"),
        (KEY, {"output_format": "mp3_44100_100"}, "invalid_format"),
        (KEY, {"inactivity_timeout": "500"}, "invalid_options"),
    ],
)
def test_refusals_are_that_apis_errors_then_a_1008_close(server, key, query, error) -> None:
    async def run() -> tuple[dict, int]:
        async with _open(_url(server, "multi-stream-input", **query), key=key) as ws:
            if key is None:  # the server waits for a first message that may hold the key
                await ws.send(json.dumps({"text": " ", "context_id": "a"}))
            return await _last_before_close(ws)

    message, code = asyncio.run(run())
    assert message["error"] == error and message["code"] == 1008 and message["message"]
    assert code == 1008


def test_an_unknown_voice_is_refused_and_malformed_json_is_not_fatal(server) -> None:
    async def run() -> tuple[dict, int, dict]:
        async with connect(
            f"{server.url}/v1/text-to-speech/nobody/multi-stream-input?output_format=pcm_24000",
            additional_headers={"xi-api-key": KEY},
        ) as ws:
            refused = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        async with _open(_url(server, "multi-stream-input")) as ws:
            await ws.send("{not json")
            malformed = json.loads(await ws.recv())
            await ws.send(json.dumps({"text": "Still here. ", "context_id": "a"}))
            await ws.send(json.dumps({"context_id": "a", "flush": True}))
            await ws.send(json.dumps({"context_id": "a", "close_context": True}))
            seen = await _until_final(ws, "a")
            await ws.close()
        assert _pcm(seen, "a").size > 0
        assert closed.value.rcvd is not None
        return refused, closed.value.rcvd.code, malformed

    refused, code, malformed = asyncio.run(run())
    assert refused["error"] == "invalid_voice" and "nobody" in refused["message"] and code == 1008
    assert malformed["error"] == "invalid_input_message"


def test_no_text_for_the_inactivity_timeout_closes_the_socket(server) -> None:
    async def run() -> tuple[dict, int]:
        async with _open(_url(server, "stream-input", inactivity_timeout="1")) as ws:
            return await _last_before_close(ws)

    message, code = asyncio.run(run())
    assert message["error"] == "input_timeout_exceeded" and code == 1008


def _v1_at_speed(server: RunningServer, text: str, speed: float) -> np.ndarray:
    """Protocol v1's audio for `text` sent at once on a context with `speed`, as 16-bit PCM."""

    async def speak() -> np.ndarray:
        async with await Client.connect(
            server.url,
            api_key=KEY,
            voice={"speaker": "vivian"},
            format={"encoding": "pcm_s16le", "sample_rate": 24000},
            sampling={"seed": SEED},
        ) as client:
            context = client.context(speed=speed)
            await context.push(text)
            await context.end()
            return await context.read_all()

    return np.round(asyncio.run(speak()) * 32767).astype(np.int16)


@pytest.mark.parametrize(
    ("path", "init", "speed"),
    [
        ("multi-stream-input", {"context_id": "a"}, 1.2),  # a context's own init (Pipecat, LiveKit)
        ("multi-stream-input", {}, 0.7),  # the socket's first message, for every context
        ("stream-input", {}, 0.85),
    ],
)
def test_voice_settings_speed_is_v1s_speed(server, path: str, init: dict, speed: float) -> None:
    multi = path == "multi-stream-input"
    context = "a" if multi else None
    ids = {"context_id": "a"} if multi else {}

    async def run() -> list[dict]:
        async with _open(_url(server, path, seed=SEED)) as ws:
            await ws.send(
                json.dumps({"text": " ", **init, "voice_settings": {"stability": 0.5, "speed": speed}})
            )
            for piece in PIECES:
                await ws.send(json.dumps({"text": piece, **ids}))
            if multi:
                await ws.send(json.dumps({**ids, "flush": True}))
                await ws.send(json.dumps({**ids, "close_context": True}))
            else:
                await ws.send(json.dumps({"text": ""}))
            seen = await _until_final(ws, context)
            await ws.close()
        return seen

    seen = asyncio.run(run())
    text = "".join(PIECES)
    heard, expected = _pcm(seen, context), _v1_at_speed(server, text, speed)
    # The speech guard may end the two at different lengths (it counts from when the text was all
    # in); each stretch's last ~100 ms reads its own end, so the samples both have up to there agree.
    shared = min(heard.size, expected.size) - 2400
    assert shared > 24000, (heard.size, expected.size)
    np.testing.assert_array_equal(heard[:shared], expected[:shared])
    spelled, starts = _alignment(seen)
    assert spelled == text.strip()
    assert all(s == sorted(s) and s[0] >= 0 for s in starts)
    for message in seen:  # each message's characters run to its end, on the stretched audio
        if message.get("audio"):
            alignment, ms = message["alignment"], len(base64.b64decode(message["audio"])) // 2 / 24
            assert alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1] == round(ms)


@pytest.mark.parametrize("speed", [1.5, 0.5, "fast", True])
def test_a_speed_outside_elevenlabs_range_is_refused_then_a_1008_close(server, speed: Any) -> None:
    async def run() -> tuple[dict, int]:
        async with _open(_url(server, "multi-stream-input")) as ws:
            await ws.send(json.dumps({"text": " ", "context_id": "a", "voice_settings": {"speed": speed}}))
            return await _last_before_close(ws)

    message, code = asyncio.run(run())
    assert message["error"] == "invalid_options" and message["code"] == 1008 and code == 1008
    assert "voice_settings.speed is 0.7 to 1.2" in message["message"] and message["contextId"] == "a"
