"""POST /v1/audio/speech (OpenAI-compatible), GET /v1/voices and GET /metrics on a real server."""

import asyncio
import io
import struct

import httpx
import numpy as np
import soundfile as sf

from tests.server.wsclient import WireClient
from voicewire.engine import SamplingParams, StreamOptions

TEXT = "Hello there, this is a test."


def _post(server, **body) -> httpx.Response:
    return httpx.post(
        f"{server.http}/v1/audio/speech", json={"model": "tts-1", "input": TEXT, **body}, timeout=120
    )


def test_wav_in_one_body(server) -> None:
    response = _post(server, voice="vivian", response_format="wav", seed=1)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    audio, rate = sf.read(io.BytesIO(response.content), dtype="float32")
    assert rate == 24000 and audio.ndim == 1 and audio.shape[0] % 1920 == 0 and audio.shape[0] > 0
    assert float(np.sqrt(np.mean(audio**2))) > 1e-3


def test_streamed_wav_and_pcm(server) -> None:
    with httpx.stream(
        "POST",
        f"{server.http}/v1/audio/speech",
        json={"input": TEXT, "voice": "ryan", "stream": True, "seed": 9},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        pieces = list(response.iter_bytes())
    body = b"".join(pieces)
    riff, size, wave, fmt, _, pcm, channels, rate, _, _, bits, data, data_size = struct.unpack(
        "<4sI4s4sIHHIIHH4sI", body[:44]
    )
    assert (riff, wave, fmt, data) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert (pcm, channels, rate, bits) == (1, 1, 24000, 16) and size == data_size == 0xFFFFFFFF
    assert (len(body) - 44) % (1920 * 2) == 0 and len(body) > 44
    raw = _post(server, voice="ryan", response_format="pcm", stream=True, seed=9)
    assert raw.status_code == 200 and raw.headers["content-type"] == "audio/pcm"
    assert len(raw.content) == len(body) - 44  # the same audio, without a header


def test_bad_requests_are_4xx_with_openai_errors(server) -> None:
    cases = [
        ({"response_format": "mp3"}, "unsupported_format"),
        ({"speed": 5.0}, "invalid_request"),
        ({"voice": "nobody"}, "invalid_voice"),
        ({"input": ""}, "invalid_request"),
        ({"temperature": 0}, "invalid_request"),
    ]
    for body, code in cases:
        response = _post(server, **body)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == code, body


def test_every_client_mistake_is_a_4xx_with_its_code(server) -> None:
    """Issue 46, defect 3: an unknown voice or language, and every other client mistake on every
    HTTP endpoint of a CustomVoice server, is a 4xx with a stable code (never a 500)."""
    speech, voices = f"{server.http}/v1/audio/speech", f"{server.http}/v1/voices"
    cases = [
        (_post(server, voice="nobody"), 400, "invalid_voice"),
        (_post(server, voice="vivian", language="klingon"), 400, "invalid_voice"),
        (_post(server, language="klingon"), 400, "invalid_voice"),
        (_post(server, voice="vivian", instructions="calm"), 400, "invalid_voice"),  # 0.6B: no instruct
        (_post(server, ref_audio="AAAA"), 400, "invalid_voice"),  # cloning needs a Base checkpoint
        (_post(server, ref_text="words"), 400, "invalid_voice"),
        (_post(server, seed="one"), 400, "invalid_request"),
        (_post(server, input=5), 400, "invalid_request"),
        (httpx.post(speech, content=b"\xff\xfe", timeout=10), 400, "invalid_request"),
        (httpx.post(speech, content=b"[" * 100_000, timeout=10), 400, "invalid_request"),
        (httpx.post(speech, content=b" " * 28_000_000, timeout=30), 413, "upload_too_large"),
        (httpx.post(voices, json={"name": "x", "audio": ""}, timeout=10), 400, "cloning_unsupported"),
        (httpx.get(f"{voices}/voice_0", timeout=10), 404, "voice_not_found"),
        (httpx.delete(f"{voices}/voice_0", timeout=10), 404, "voice_not_found"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, (response.request.content[:80], response.text)
        assert response.json()["error"]["code"] == code, response.text
    for method, url in (
        ("GET", speech),
        ("PUT", voices),
        ("POST", f"{voices}/x"),
        ("GET", f"{server.http}/v1/tokens"),
    ):
        assert 400 <= httpx.request(method, url, timeout=10).status_code < 500, (method, url)


def _engine_pcm16(server, speaker: str, options: StreamOptions) -> bytes:
    """TEXT spoken by the server's engine itself with `options`, as the endpoint's pcm bytes."""

    async def run() -> np.ndarray:
        engine = server.engine
        stream = engine.open_stream(await engine.voice(speaker=speaker), options)
        stream.push_text(TEXT)
        stream.end()
        return np.concatenate([chunk.pcm async for chunk in stream])

    pcm = asyncio.run(run())
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def test_the_sockets_sampling_options(server) -> None:
    """greedy, seed, temperature, top_k, top_p and repetition_penalty reach the engine as the
    socket's start.sampling sends them, and are refused with the socket's codes."""
    greedy = _post(server, voice="serena", response_format="pcm", greedy=True)
    assert greedy.status_code == 200, greedy.text
    assert greedy.content == _engine_pcm16(server, "serena", StreamOptions(greedy=True))
    seeded = _post(server, voice="serena", response_format="pcm", seed=4)
    assert seeded.status_code == 200 and seeded.content != greedy.content
    fields = {"temperature": 0.5, "top_k": 3, "top_p": 0.9, "repetition_penalty": 1.2}
    tuned = _post(server, voice="serena", response_format="pcm", seed=4, **fields)
    talker = SamplingParams(temperature=0.5, top_k=3, top_p=0.9)
    options = StreamOptions(seed=4, talker=talker, repetition_penalty=1.2)
    assert tuned.status_code == 200 and tuned.content == _engine_pcm16(server, "serena", options)
    assert tuned.content != seeded.content
    cases = [
        ({"greedy": True, "seed": 1}, "invalid_options"),  # as the socket: greedy takes no seed
        ({"greedy": "yes"}, "invalid_request"),  # the socket's invalid_message: a mistyped field
        ({"top_k": -1}, "invalid_request"),
        ({"top_p": 1.5}, "invalid_request"),
        ({"repetition_penalty": 0}, "invalid_request"),
    ]
    for body, code in cases:
        response = _post(server, voice="serena", **body)
        assert (response.status_code, response.json()["error"]["code"]) == (400, code), (body, response.text)


def test_speed_changes_the_length(server) -> None:
    lengths = {}
    for speed in (1.0, 1.5):
        response = _post(server, voice="aiden", response_format="pcm", seed=5, speed=speed)
        assert response.status_code == 200
        lengths[speed] = len(response.content) // 2
    assert lengths[1.5] == round(lengths[1.0] / 1.5)


def test_voices(server) -> None:
    voices = httpx.get(f"{server.http}/v1/voices", timeout=10).json()
    assert voices["variant"] == "custom_voice" and not voices["cloning"] and voices["stored"] == []
    assert {v["id"] for v in voices["voices"]} == {"aiden", "dylan", "eric", "ryan", "serena", "vivian"}
    assert {"id": "eric", "dialect": "sichuan_dialect"} in voices["voices"]
    assert "english" in voices["languages"] and "auto" in voices["languages"]


def test_metrics_count_sessions_latency_and_errors(server) -> None:
    async def session():
        client = await WireClient.open(server.url)
        await client.start(voice={"speaker": "vivian"}, max_frames=6)
        await client.send({"type": "text", "context_id": "m", "text": TEXT})
        await client.send({"type": "end", "context_id": "m"})
        await client.until(lambda m: m["type"] == "done")
        await client.send({"type": "playback", "context_id": "m", "played_samples": 960, "underruns": 2})
        await client.send({"type": "flush", "context_id": "nope"})
        await client.until(lambda m: m["type"] == "error")
        await client.close()

    asyncio.run(session())
    text = httpx.get(f"{server.http}/metrics", timeout=10).text
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values["voicewire_first_audio_seconds_count"] >= 1
    assert values["voicewire_realtime_factor_count"] >= 1
    assert values["voicewire_client_underruns_total"] >= 2
    assert values['voicewire_errors_total{code="unknown_context"}'] >= 1
    assert "voicewire_sessions" in values and "voicewire_contexts" in values
