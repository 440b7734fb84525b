"""The /v1/stream WebSocket against a real uvicorn server on 127.0.0.1."""

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import numpy as np
import opuslib
import pytest
import soxr
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.server.conftest import RunningServer, process_server, running_server, vllm_server
from tests.server.wsclient import JSON, MSGPACK, WireClient
from voicewire.engine import Engine
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.engine.runtime.synthesis import SynthesisRequest, synthesize
from voicewire.server.config import ServerConfig
from voicewire.server.encoder import mulaw_decode

TEXT = "Hello there, this is a test of the voice. How are you today?"
FRAMES = 24
GREEDY = {
    "voice": {"speaker": "vivian", "language": "english"},
    "sampling": {"greedy": True},
    "max_frames": FRAMES,
}


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _speak(client: WireClient, context: str, text: str) -> tuple[dict, list[dict]]:
    for piece in _pieces(text):
        await client.send({"type": "text", "context_id": context, "text": piece})
    await client.send({"type": "end", "context_id": context})
    return await client.until(lambda m: m["type"] in ("done", "error") and m.get("context_id") == context)


@pytest.fixture(scope="module", params=["torch", "engine-process", "vllm"])
def server(request, tiny_models, tiny_checkpoints, tmp_path_factory) -> Iterator[RunningServer]:
    """The server with the torch engine in its process, the same with the engine in a process of its
    own (as `voicewire serve` runs), and `voicewire serve --backend vllm` in the vLLM virtualenv:
    every test below runs against all three."""
    config = ServerConfig(max_contexts=3, max_text_chars=500, max_message_bytes=4096, send_queue=4096)
    if request.param == "torch":
        with running_server(tiny_models["custom_voice"], config) as running:
            yield running
    elif request.param == "engine-process":
        with process_server(tiny_checkpoints["custom_voice"], config) as running:
            yield running
    else:
        with vllm_server(config, tmp_path_factory.mktemp("vllm-server")) as running:
            yield running


@pytest.fixture(scope="module")
def reference(server: RunningServer, tiny_models) -> np.ndarray:
    """The engine's own PCM (24 kHz) for TEXT, from the server's checkpoint (the built-in tiny one
    for the vllm server) in process: the same greedy codes the server makes."""
    request = SynthesisRequest(
        text=TEXT, speaker="vivian", language="english", layout="dual_track", greedy=True, max_frames=FRAMES
    )
    model = (
        tiny_models["custom_voice"]
        if isinstance(server.engine, Engine | EngineProcess)
        else Qwen3TTS.load("tiny")
    )
    return synthesize(model, request).audio


@pytest.mark.parametrize("subprotocol", [MSGPACK, JSON])
@pytest.mark.parametrize("rate", [24000, 48000])
def test_opus_end_to_end(server, reference: np.ndarray, subprotocol: str, rate: int) -> None:
    async def run():
        client = await WireClient.open(server.url, subprotocol)
        # The random model's audio is noise-like, which Opus keeps as a waveform only at high bitrates.
        ready = await client.start(
            format={"encoding": "opus", "sample_rate": rate, "bitrate": 128000}, **GREEDY
        )
        done, messages = await _speak(client, "c1", TEXT)
        await client.close()
        return ready, done, messages

    ready, done, messages = asyncio.run(run())
    assert (
        ready["encoding"] == "opus" and ready["sample_rate"] == rate and ready["packet_samples"] == rate // 50
    )
    audio = [m for m in messages if m["type"] == "audio"]
    assert done["type"] == "done" and done["reason"] == "max_frames"
    assert [m["seq"] for m in audio] == list(range(len(audio)))
    assert sum(m["samples"] for m in audio) == done["samples"] == FRAMES * 1920 * rate // 24000
    assert [m["pts"] for m in audio] == np.cumsum([0] + [m["samples"] for m in audio])[:-1].tolist()
    assert audio[-1]["final"] and not any(m["final"] for m in audio[:-1])
    decoder = opuslib.Decoder(rate, 1)
    decoded = (
        np.concatenate(
            [np.frombuffer(decoder.decode(m["data"], rate // 50), dtype="<i2") for m in audio]
        ).astype(np.float32)
        / 32768
    )
    skip = ready["codec_delay"]
    assert decoded.shape[0] >= skip + done["samples"]
    heard = decoded[skip : skip + done["samples"]]  # exactly the reported count
    expected = soxr.resample(reference, 24000, rate) if rate != 24000 else reference
    assert heard.shape == expected.shape
    assert np.corrcoef(heard, expected)[0, 1] > 0.97  # aligned by the reported pre-skip alone
    progress = "".join(m["text"] for m in messages if m["type"] == "progress")
    assert progress and TEXT.startswith(progress)


@pytest.mark.parametrize(
    ("encoding", "rate", "width"), [("pcm_s16le", 16000, 2), ("pcm_f32le", 44100, 4), ("mulaw", 8000, 1)]
)
def test_pcm_and_mulaw(server, reference: np.ndarray, encoding: str, rate: int, width: int) -> None:
    async def run():
        client = await WireClient.open(server.url)
        ready = await client.start(format={"encoding": encoding, "sample_rate": rate}, **GREEDY)
        done, messages = await _speak(client, "c", TEXT)
        await client.close()
        return ready, done, messages

    ready, done, messages = asyncio.run(run())
    audio = [m for m in messages if m["type"] == "audio"]
    data = b"".join(m["data"] for m in audio)
    assert ready["packet_samples"] == 0 and ready["codec_delay"] == 0
    assert len(data) == done["samples"] * width and done["samples"] == round(FRAMES * 1920 * rate / 24000)
    if encoding == "pcm_s16le":
        heard = np.frombuffer(data, "<i2").astype(np.float32) / 32767
    elif encoding == "pcm_f32le":
        heard = np.frombuffer(data, "<f4")
    else:
        heard = mulaw_decode(data)
    expected = soxr.resample(reference, 24000, rate)
    assert np.corrcoef(heard, expected[: heard.shape[0]])[0, 1] > 0.95


def test_two_contexts_and_cancel(server) -> None:
    async def run():
        client = await WireClient.open(server.url)
        await client.start(voice={"speaker": "ryan"}, sampling={"seed": 4}, max_frames=2000)
        for context in ("a", "b"):
            await client.send({"type": "text", "context_id": context, "text": TEXT * 3})
        await client.send({"type": "end", "context_id": "a"})
        seen = {"a": 0, "b": 0}
        received = []
        while min(seen.values()) < 5:  # both contexts stream at once
            message = await client.recv()
            received.append(message)
            if message["type"] == "audio":
                seen[message["context_id"]] += 1
        await client.send({"type": "cancel", "context_id": "b"})
        cancelled, before = await client.until(lambda m: m["type"] == "cancelled")
        after = []
        for _ in range(30):
            after.append(await client.recv())
        await client.close()
        return cancelled, received + before, after

    cancelled, before, after = asyncio.run(run())
    assert cancelled["context_id"] == "b"
    # Everything of b received before `cancelled`, from its first packet on.
    sent_b = sum(m["samples"] for m in before if m["type"] == "audio" and m["context_id"] == "b")
    assert cancelled["samples_generated"] >= sent_b > 0 and cancelled["samples_dropped"] >= 0
    assert not [m for m in after if m.get("context_id") == "b"]  # nothing of b after cancelled
    assert any(m["type"] == "audio" and m["context_id"] == "a" for m in after)  # a goes on
    _wait_for(lambda: server.engine.live_streams == 0)  # the disconnect freed a as well


def _wait_for(condition, timeout: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_unknown_subprotocol_is_refused(server) -> None:
    async def run():
        await WireClient.open(server.url, "chat.v2")

    with pytest.raises(InvalidStatus) as info:
        asyncio.run(run())
    assert info.value.response.status_code == 403


def test_audio_frames_are_not_deflated(server) -> None:
    # The client offers permessage-deflate (websockets does by default); Opus does not compress,
    # so the server declines it rather than spend its event loop on it.
    async def run() -> tuple[str | None, dict]:
        client = await WireClient.open(server.url)
        try:
            await client.start(**GREEDY)
            assert client.ws.request is not None and client.ws.response is not None
            offered = client.ws.request.headers.get("Sec-WebSocket-Extensions")
            return offered, dict(client.ws.response.headers)
        finally:
            await client.ws.close()

    offered, headers = asyncio.run(run())
    assert offered is not None and "permessage-deflate" in offered
    assert "sec-websocket-extensions" not in {k.lower() for k in headers}


def test_health_and_ready(server) -> None:
    for path, status in (("/health", "ok"), ("/ready", "ready")):
        with urllib.request.urlopen(server.http + path, timeout=10) as response:
            body = json.loads(response.read())
            assert response.status == 200 and body["status"] == status
    # The demo page's banner: the vllm server runs `--model tiny`, the built-in random checkpoint;
    # the others a checkpoint folder, which is not flagged (random as this one is).
    builtin = not isinstance(server.engine, Engine | EngineProcess)
    assert body["random_weights"] is builtin


def test_an_idle_socket_is_closed(tiny_models) -> None:
    async def run(url: str):
        client = await WireClient.open(url)
        await client.start(voice={"speaker": "vivian"})
        error = await client.recv(timeout=10)
        with pytest.raises(ConnectionClosed):
            await client.recv(timeout=10)
        return error, client.ws.close_code

    with running_server(tiny_models["custom_voice"], ServerConfig(idle_timeout_s=0.5)) as server:
        error, code = asyncio.run(run(server.url))
    assert (error["code"], error["fatal"], code) == ("idle_timeout", True, 1000)
