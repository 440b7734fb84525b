"""OpenAI's streaming speech format (`stream_format: "sse"`) driven by the official `openai` SDK
(pinned in pyproject's dev extra) against a real server, changing only the base URL and the key."""

import base64
import json
import struct
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.server.conftest import RunningServer, serving
from voicewire.engine import Engine, EngineConfig
from voicewire.engine.config import SpeechGuard
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.server.config import ServerConfig

TEXT = "Hello there."
# The tiny checkpoint's random talker never says end-of-speech: this guard ends each request
# about half a second after its text (7 frames, and 1.25 a token), some 20 frames for TEXT.
GUARD = SpeechGuard(after_text_s=0.5, per_token_s=0.1)


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    config = EngineConfig(max_streams=4, kv_length=256, speech_guard=GUARD)
    with Engine(tiny_models["custom_voice"], config) as engine, serving(engine, ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def text_tokens(server: RunningServer) -> int:
    # TEXT in the checkpoint's own tokenizer: what usage.input_tokens must say.
    return len(TextTokenizer.from_folder(server.engine.info.folder).encode(TEXT))


@pytest.fixture(scope="module")
def client(server: RunningServer) -> OpenAI:
    # The server is open, so any key passes; max_retries=0: a refusal must surface, not be retried.
    return OpenAI(base_url=f"{server.http}/v1", api_key="sk-unused", max_retries=0)


def _events(client: OpenAI, **fields: Any) -> tuple[str, list[dict]]:
    """One SSE request: its content type and its events, parsed by the SDK's own SSE decoder (the
    one its event streams use: 3.57.0 has no typed speech events, it hands back the raw bytes)."""
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", input=TEXT, stream_format="sse", **fields
    ) as response:
        decoder = client._make_sse_decoder()
        events = [event.json() for event in decoder.iter_bytes(response.iter_bytes())]
        return response.headers["content-type"], events


def _audio_stream(client: OpenAI, **fields: Any) -> bytes:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", input=TEXT, **fields
    ) as response:
        assert response.headers["content-type"].startswith("audio/")
        return b"".join(response.iter_bytes())


@pytest.mark.parametrize(("response_format", "voice"), [("pcm", "vivian"), ("wav", {"id": "vivian"})])
def test_sse_deltas_are_the_audio_streams_bytes(
    client: OpenAI, text_tokens: int, response_format: str, voice: Any
) -> None:
    content_type, events = _events(
        client, voice=voice, response_format=response_format, extra_body={"seed": 9}
    )
    assert content_type.startswith("text/event-stream")
    *deltas, done = events
    assert len(deltas) > 1  # streamed as generated, not in one piece
    assert all(set(event) == {"type", "audio"} for event in deltas)
    assert {event["type"] for event in deltas} == {"speech.audio.delta"}
    sse_audio = b"".join(base64.b64decode(event["audio"], validate=True) for event in deltas)

    raw = _audio_stream(
        client, voice="vivian", response_format=response_format, extra_body={"seed": 9, "stream": True}
    )
    assert sse_audio == raw

    pcm = sse_audio
    if response_format == "wav":
        fields = struct.unpack("<4sI4s4sIHHIIHH4sI", sse_audio[:44])
        assert fields[0] == b"RIFF" and fields[6:8] == (1, 24000) and fields[12] == 0xFFFFFFFF
        pcm = sse_audio[44:]
    frames, rest = divmod(len(pcm) // 2, 1920)
    assert rest == 0 and frames >= 2
    assert done == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": text_tokens, "output_tokens": frames, "total_tokens": text_tokens + frames},
    }


def test_bad_sse_requests_are_4xx_before_any_event(client: OpenAI) -> None:
    cases = [
        ({"voice": "vivian", "extra_body": {"stream_format": "ogg"}}, "invalid_request", "stream_format"),
        ({"voice": "vivian", "response_format": "mp3"}, "unsupported_format", "mp3"),
        ({"voice": "nobody"}, "invalid_voice", "nobody"),
        ({"voice": {"id": "vivian", "name": "x"}}, "invalid_request", "voice"),
    ]
    for fields, code, mentioned in cases:
        with pytest.raises(openai.BadRequestError) as raised:
            _events(client, **fields)
        assert raised.value.status_code == 400, fields
        error = json.loads(raised.value.response.read())["error"]
        assert error["code"] == code and mentioned in error["message"], (fields, error)


def test_a_client_that_leaves_stops_the_stream(server: RunningServer, client: OpenAI) -> None:
    # Long enough text to run for tens of seconds here, unless leaving cancels it.
    text = " ".join(["Hello there, this is a much longer test of the event stream."] * 6)
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", input=text, voice="ryan", response_format="pcm", stream_format="sse"
    ) as response:
        first = next(client._make_sse_decoder().iter_bytes(response.iter_bytes()))
        assert first.json()["type"] == "speech.audio.delta"
        assert server.engine.live_streams == 1
    deadline = time.monotonic() + 5
    while server.engine.live_streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.engine.live_streams == 0
