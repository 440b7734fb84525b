"""The voice library on a real server with the tiny Base checkpoint: clone through POST /v1/voices,
speak by id on the socket and over HTTP with the codes of the engine's own clone, ownership,
bad input, restarts and metrics."""

import asyncio
import base64
import contextlib
import dataclasses
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect

from tests.server.conftest import RunningServer
from voicewire.engine import Engine, EngineConfig, StreamOptions
from voicewire.server.app import BackgroundServer, create_app
from voicewire.server.auth import ANONYMOUS_CALLER
from voicewire.server.config import ServerConfig, VoiceLimits
from voicewire.server.voice_store import VoiceStore, new_voice_id
from voicewire.server.voices_api import VoiceLibrary
from voicewire.server.wire import MSGPACK

TEXT = "Hello there, this is a test."
REF_TEXT = "A short reference sentence."
FRAMES = 12
KEYS = ("key-alpha-1234", "key-bravo-5678")


def _reference(seconds: float = 1.5, rate: int = 24000, fmt: str = "WAV", channels: int = 1) -> bytes:
    rng = np.random.default_rng(3)
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 170 * t) + 0.05 * rng.standard_normal(t.shape)
    data = np.repeat(wave[:, None], channels, axis=1).astype(np.float32)
    out = io.BytesIO()
    sf.write(out, data, rate, format=fmt, subtype="PCM_16" if fmt in ("WAV", "FLAC") else None)
    return out.getvalue()


REFERENCE = _reference()


@dataclass
class LibraryServer(RunningServer):
    library: VoiceLibrary | None = None


@contextlib.contextmanager
def library_server(engine, data_dir: Path, config: ServerConfig, **limits) -> Iterator[LibraryServer]:
    config = dataclasses.replace(config, data_dir=str(data_dir), voices=VoiceLimits(**limits))
    app = create_app(engine, config)
    runner = BackgroundServer(app)
    port = runner.start()
    try:
        yield LibraryServer(
            f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}", engine, config, app.state.voices
        )
    finally:
        runner.stop()


@pytest.fixture(scope="module")
def base_engine(tiny_models) -> Iterator[Engine]:
    # A short KV bound: HTTP speech of the random tiny model runs to it.
    with Engine(tiny_models["base"], EngineConfig(max_streams=8, kv_length=96)) as engine:
        yield engine


@pytest.fixture(scope="module")
def open_server(base_engine, tmp_path_factory) -> Iterator[RunningServer]:
    data = tmp_path_factory.mktemp("voices-open")
    with library_server(base_engine, data, ServerConfig(), max_voices_per_key=60) as running:
        yield running


@pytest.fixture(scope="module")
def keyed_server(base_engine, tmp_path_factory) -> Iterator[RunningServer]:
    data = tmp_path_factory.mktemp("voices-keyed")
    config = ServerConfig(api_keys=KEYS)
    with library_server(base_engine, data, config, max_voices_per_key=3, max_seconds=5.0) as running:
        yield running


def _auth(credential: str | None) -> dict[str, str]:
    return {} if credential is None else {"Authorization": f"Bearer {credential}"}


def _upload(server: RunningServer, credential: str | None = None, audio: bytes = REFERENCE, **fields):
    body = {"name": "Ada", "audio": base64.b64encode(audio).decode(), **fields}
    return httpx.post(f"{server.http}/v1/voices", json=body, headers=_auth(credential), timeout=120)


def _speak_on_socket(
    server: RunningServer, voice: dict, credential: str | None = None, max_frames: int | None = FRAMES
):
    """PCM (float32, 24 kHz) of TEXT spoken greedily, or the error the start got. max_frames None:
    as long as the engine speaks it (to EOS or the KV bound)."""

    async def run():
        async with connect(
            f"{server.url}/v1/stream", subprotocols=[MSGPACK], additional_headers=_auth(credential)
        ) as ws:
            start = {
                "type": "start",
                "voice": voice,
                "format": {"encoding": "pcm_f32le", "sample_rate": 24000},
                "sampling": {"greedy": True},
            }
            if max_frames is not None:
                start["max_frames"] = max_frames
            await ws.send(msgpack.packb(start))
            first = msgpack.unpackb(await ws.recv())
            if first["type"] != "ready":
                return first
            await ws.send(msgpack.packb({"type": "text", "context_id": "c", "text": TEXT}))
            await ws.send(msgpack.packb({"type": "end", "context_id": "c"}))
            pcm = []
            while (message := msgpack.unpackb(await asyncio.wait_for(ws.recv(), 60)))["type"] != "done":
                assert message["type"] in ("audio", "progress", "flushed"), message
                if message["type"] == "audio":
                    pcm.append(np.frombuffer(message["data"], dtype="<f4"))
            return np.concatenate(pcm)

    return asyncio.run(run())


def _direct(engine, voice=None, max_frames: int | None = FRAMES, **fields) -> tuple[np.ndarray, np.ndarray]:
    """(codes, pcm) of TEXT from the engine itself, greedy."""

    async def run():
        spoken = voice if voice is not None else await engine.voice(**fields)
        stream = engine.open_stream(spoken, StreamOptions(greedy=True, max_frames=max_frames))
        stream.push_text(TEXT)
        stream.end()
        chunks = [chunk async for chunk in stream]
        return np.concatenate([c.codes for c in chunks]), np.concatenate([c.pcm for c in chunks])

    return asyncio.run(run())


@pytest.mark.parametrize("ref_text", [None, REF_TEXT], ids=["xvector", "in_context"])
def test_a_cloned_voice_speaks_with_the_engines_own_codes(open_server, base_engine, ref_text) -> None:
    fields = {} if ref_text is None else {"ref_text": ref_text}
    created = _upload(open_server, language="english", **fields)
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["in_context"] is (ref_text is not None) and voice["duration"] == 1.5
    assert voice["id"].startswith("voice_") and voice["name"] == "Ada"

    samples, rate = sf.read(io.BytesIO(REFERENCE), dtype="float32")
    direct = {"ref_audio": (samples, rate), "ref_text": ref_text, "language": "english"}
    codes, pcm = _direct(base_engine, **direct)
    stored = asyncio.run(open_server.library.resolve(voice["id"], ANONYMOUS_CALLER))
    stored_codes, _ = _direct(base_engine, voice=stored)
    assert np.array_equal(stored_codes, codes)  # the stored voice is the engine's clone, exactly

    heard = _speak_on_socket(open_server, {"id": voice["id"]})
    assert isinstance(heard, np.ndarray), heard
    assert heard.shape == pcm.shape and np.array_equal(heard, pcm)

    speech = httpx.post(
        f"{open_server.http}/v1/audio/speech",
        json={"input": TEXT, "voice": voice["id"], "response_format": "pcm", "seed": 1},
        timeout=120,
    )
    assert speech.status_code == 200 and len(speech.content) > 0
    one_off = httpx.post(
        f"{open_server.http}/v1/audio/speech",
        json={
            "input": TEXT,
            "ref_audio": base64.b64encode(REFERENCE).decode(),
            "response_format": "pcm",
            "seed": 1,
            "language": "english",
        }
        | fields,
        timeout=120,
    )
    assert one_off.status_code == 200 and one_off.content == speech.content


def test_voices_survive_a_restart_and_fifty_are_listed(base_engine, tmp_path: Path) -> None:
    with library_server(base_engine, tmp_path, ServerConfig()) as first:
        made = _upload(first, name="Keeper", ref_text=REF_TEXT).json()
    store = VoiceStore(tmp_path)
    template = store.get(made["id"])
    assert template is not None
    for i in range(49):
        store.add(
            template.__class__(
                **{
                    **template.__dict__,
                    "id": new_voice_id(),
                    "name": f"v{i}",
                    "created": template.created + i + 1,
                }
            )
        )
    store.close()
    with library_server(base_engine, tmp_path, ServerConfig()) as second:  # a new process's store
        listed = httpx.get(f"{second.http}/v1/voices", timeout=10).json()
        assert listed["cloning"] and listed["voices"] == []
        assert len(listed["stored"]) == 50 and listed["stored"][0]["id"] == made["id"]
        one = httpx.get(f"{second.http}/v1/voices/{made['id']}", timeout=10).json()
        assert one["name"] == "Keeper" and one["in_context"] and one["ref_text"] == REF_TEXT
        assert isinstance(_speak_on_socket(second, {"id": made["id"]}), np.ndarray)


def test_two_uploads_at_once_are_both_stored(open_server) -> None:
    async def run():
        async with httpx.AsyncClient(timeout=120) as client:
            bodies = [
                {"name": f"twin{i}", "audio": base64.b64encode(_reference(1.2 + i / 10)).decode()}
                for i in range(2)
            ]
            return await asyncio.gather(
                *(client.post(f"{open_server.http}/v1/voices", json=b) for b in bodies)
            )

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [201, 201]
    stored = {v["id"] for v in httpx.get(f"{open_server.http}/v1/voices", timeout=10).json()["stored"]}
    assert {r.json()["id"] for r in responses} <= stored


def test_ownership_with_two_keys_and_a_token(keyed_server) -> None:
    alpha, bravo = KEYS
    token = httpx.post(f"{keyed_server.http}/v1/tokens", headers=_auth(alpha), timeout=10).json()["token"]
    made = _upload(keyed_server, alpha)
    assert made.status_code == 201, made.text
    voice_id = made.json()["id"]
    by_token = _upload(keyed_server, token, name="ViaToken").json()["id"]
    url = f"{keyed_server.http}/v1/voices"

    def listed(credential: str) -> set[str]:
        return {v["id"] for v in httpx.get(url, headers=_auth(credential), timeout=10).json()["stored"]}

    assert listed(alpha) == listed(token) == {voice_id, by_token}  # a token acts for its key
    assert listed(bravo) == set()
    assert httpx.get(f"{url}/{voice_id}", headers=_auth(bravo), timeout=10).status_code == 404
    assert httpx.get(f"{url}/{by_token}", headers=_auth(alpha), timeout=10).status_code == 200
    refused = _speak_on_socket(keyed_server, {"id": voice_id}, bravo)
    assert isinstance(refused, dict) and refused["code"] == "invalid_voice", refused
    assert isinstance(_speak_on_socket(keyed_server, {"id": voice_id}, token), np.ndarray)
    speech = {"input": TEXT, "voice": voice_id, "response_format": "pcm"}
    other = httpx.post(f"{keyed_server.http}/v1/audio/speech", json=speech, headers=_auth(bravo), timeout=60)
    assert other.status_code == 400 and other.json()["error"]["code"] == "invalid_voice"
    deleted = httpx.delete(f"{url}/{voice_id}", headers=_auth(bravo), timeout=10)
    assert deleted.status_code == 404 and deleted.json()["error"]["code"] == "voice_not_found"
    assert httpx.delete(f"{url}/{voice_id}", headers=_auth(token), timeout=10).status_code == 200
    assert httpx.get(f"{url}/{voice_id}", headers=_auth(alpha), timeout=10).status_code == 404
    assert httpx.get(url, timeout=10).status_code == 401
    httpx.delete(f"{url}/{by_token}", headers=_auth(alpha), timeout=10)


def test_bad_uploads_are_refused_with_their_code_and_nothing_is_stored(keyed_server, tmp_path: Path) -> None:
    bravo = KEYS[1]
    url = f"{keyed_server.http}/v1/voices"
    before = httpx.get(url, headers=_auth(bravo), timeout=10).json()["stored"]
    silence = io.BytesIO()
    sf.write(silence, np.zeros(24000 * 2, dtype=np.float32), 24000, format="WAV")
    raw = {"headers": _auth(bravo) | {"content-type": "audio/wav"}, "timeout": 30}
    cases = [
        (_upload(keyed_server, bravo, audio=b"this is not audio at all"), 400, "invalid_audio"),
        (_upload(keyed_server, bravo, audio=b""), 400, "empty_audio"),
        (_upload(keyed_server, bravo, audio=_reference(0.5)), 400, "audio_too_short"),
        (_upload(keyed_server, bravo, audio=_reference(6.0)), 400, "audio_too_long"),
        (_upload(keyed_server, bravo, audio=silence.getvalue()), 400, "silent_audio"),
        (_upload(keyed_server, bravo, ref_text="x" * 1001), 400, "ref_text_too_long"),
        (_upload(keyed_server, bravo, language="klingon"), 400, "invalid_voice"),
        (_upload(keyed_server, bravo, name=""), 400, "invalid_request"),
        (httpx.post(url, json={"audio": "!!!", "name": "x"}, headers=_auth(bravo)), 400, "invalid_audio"),
        (httpx.post(url, content=b"{not json", headers=_auth(bravo)), 400, "invalid_request"),
        (
            httpx.post(url, content=b"\0" * (20_000_001), params={"name": "big"}, **raw),
            413,
            "upload_too_large",
        ),
        (
            httpx.post(url, files={"audio": ("a.wav", REFERENCE)}, data={"name": "x"}, headers=_auth(bravo)),
            400,
            "invalid_request",
        ),
        (
            httpx.post(url, content=b"<xml/>", headers=_auth(bravo) | {"content-type": "text/xml"}),
            415,
            "unsupported_media_type",
        ),
    ]
    for response, status, code in cases:
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
    raw_ok = httpx.post(url, content=_reference(fmt="FLAC", channels=2), params={"name": "flac"}, **raw)
    assert raw_ok.status_code == 201, raw_ok.text  # a FLAC file as the body, stereo downmixed
    ogg = _upload(keyed_server, bravo, audio=_reference(fmt="OGG", rate=16000))
    assert ogg.status_code == 201, ogg.text  # OGG at 16 kHz, resampled
    form = httpx.post(
        url,
        files={"file": ("a.wav", REFERENCE)},
        data={"name": "form", "language": "english"},
        headers=_auth(bravo),
    )
    assert form.status_code == 201 and form.json()["name"] == "form", form.text  # a multipart upload
    full = _upload(keyed_server, bravo)  # a fourth: the limit is 3
    assert (full.status_code, full.json()["error"]["code"]) == (409, "too_many_voices")
    after = httpx.get(url, headers=_auth(bravo), timeout=10).json()["stored"]
    assert len(after) == len(before) + 3
    for voice in after:
        httpx.delete(f"{url}/{voice['id']}", headers=_auth(bravo), timeout=10)
    metrics = httpx.get(f"{keyed_server.http}/metrics", timeout=10).text
    assert 'voicewire_voice_upload_failures_total{code="audio_too_short"} 1.0' in metrics
    assert "voicewire_voice_compute_seconds_count" in metrics and "voicewire_voices_stored" in metrics


def test_every_client_mistake_on_every_http_endpoint_is_a_4xx(keyed_server) -> None:
    alpha, _ = KEYS
    token = httpx.post(f"{keyed_server.http}/v1/tokens", headers=_auth(alpha), timeout=10).json()["token"]
    speech = f"{keyed_server.http}/v1/audio/speech"
    voices = f"{keyed_server.http}/v1/voices"

    def post(body, credential=alpha):
        return httpx.post(speech, json={"input": TEXT, **body}, headers=_auth(credential), timeout=60)

    cases = [
        (post({}), 400, "invalid_voice"),  # a Base checkpoint needs a voice
        (post({"voice": "nobody"}), 400, "invalid_voice"),
        (post({"voice": "nobody", "language": "klingon"}), 400, "invalid_voice"),
        (
            post({"ref_audio": base64.b64encode(REFERENCE).decode(), "language": "klingon"}),
            400,
            "invalid_voice",
        ),
        (post({"ref_text": "words alone"}), 400, "invalid_voice"),
        (post({"instructions": "calm"}), 400, "invalid_voice"),
        (post({"ref_audio": "!!"}), 400, "invalid_audio"),
        (post({"ref_audio": base64.b64encode(b"noise").decode()}), 400, "invalid_audio"),
        (post({"response_format": "mp3"}), 400, "unsupported_format"),
        (post({"speed": 9}), 400, "invalid_request"),
        (post({"input": ""}), 400, "invalid_request"),
        (httpx.post(speech, content=b"[[[", headers=_auth(alpha)), 400, "invalid_request"),
        (post({}, credential=None), 401, "unauthorized"),
        (post({}, credential="wrong-key"), 401, "unauthorized"),
        (httpx.get(f"{voices}/voice_0000", headers=_auth(alpha)), 404, "voice_not_found"),
        (httpx.delete(f"{voices}/voice_0000", headers=_auth(alpha)), 404, "voice_not_found"),
        (httpx.post(voices, json={"name": "x"}, headers=_auth(alpha)), 400, "invalid_request"),
        (httpx.post(voices, json=[1], headers=_auth(alpha)), 400, "invalid_request"),
        (httpx.post(voices, content=b"x", headers=_auth(alpha) | {"content-type": "text/plain"}), 415, None),
        (httpx.get(voices, headers={"Authorization": "Bearer a.b.c"}), 401, "unauthorized"),
        (httpx.post(f"{keyed_server.http}/v1/tokens", headers=_auth(token)), 401, "unauthorized"),
        (httpx.post(f"{keyed_server.http}/v1/tokens"), 401, "unauthorized"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, (response.request.url, response.text)
        if code is not None:
            assert response.json()["error"]["code"] == code, response.text
    for method, url in (("PUT", voices), ("PATCH", f"{voices}/x"), ("GET", f"{keyed_server.http}/v1/tokens")):
        assert 400 <= httpx.request(method, url, headers=_auth(alpha)).status_code < 500, (method, url)


def test_a_voice_for_another_checkpoint_is_refused_saying_why(open_server, tmp_path: Path) -> None:
    library = open_server.library
    made = _upload(open_server, name="Wide").json()
    stored = library.store.get(made["id"])
    wide = stored.__class__(
        **{
            **stored.__dict__,
            "id": new_voice_id(),
            "hidden_size": 2048,
            "xvector": np.zeros(2048, np.float32),
        }
    )
    library.store.add(wide)
    refused = _speak_on_socket(open_server, {"id": wide.id})
    assert isinstance(refused, dict) and refused["code"] == "invalid_voice" and not refused["fatal"]
    assert "hidden size 2048" in refused["message"], refused
    assert wide.id not in {
        v["id"] for v in httpx.get(f"{open_server.http}/v1/voices", timeout=10).json()["stored"]
    }
    mixed = _speak_on_socket(open_server, {"id": made["id"], "speaker_embedding": [0.0]})
    assert isinstance(mixed, dict) and mixed["code"] == "invalid_voice"


def test_other_variants_cannot_clone(server) -> None:
    """The conftest's CustomVoice server: cloning needs a Base checkpoint."""
    created = httpx.post(f"{server.http}/v1/voices", json={"name": "x", "audio": ""}, timeout=10)
    assert created.status_code == 400 and created.json()["error"]["code"] == "cloning_unsupported"
    assert "Base" in created.json()["error"]["message"]
    one_off = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"input": TEXT, "ref_audio": base64.b64encode(REFERENCE).decode()},
        timeout=10,
    )
    assert one_off.status_code == 400 and one_off.json()["error"]["code"] == "invalid_voice"
    listed = httpx.get(f"{server.http}/v1/voices", timeout=10).json()
    assert listed["stored"] == [] and listed["variant"] == "custom_voice"
    assert json.loads(json.dumps(listed["voices"]))  # the speakers, as before


def test_the_event_loop_answers_pings_while_a_voice_is_cloned(open_server) -> None:
    """Decoding, resampling and the x-vector run off the event loop: a ping on the socket is
    answered within 50 ms all along a 20 s upload (48 kHz stereo, so it is resampled too)."""
    audio = _reference(20.0, rate=48000, channels=2)

    async def run():
        async with (
            connect(f"{open_server.url}/v1/stream", subprotocols=[MSGPACK]) as ws,
        ):
            # The file as the body, sent from a thread: this loop only pings. The test client, the
            # server and its upload share one interpreter here, so the bound is the server's
            # hand-offs plus this process's own GIL waits (the engine alone: test_contract, 50 ms).
            post = {"content": audio, "params": {"name": "long"}, "headers": {"content-type": "audio/wav"}}
            upload = asyncio.create_task(
                asyncio.to_thread(httpx.post, f"{open_server.http}/v1/voices", timeout=120, **post)
            )
            waits = []
            while not upload.done():
                sent = asyncio.get_running_loop().time()
                await ws.send(msgpack.packb({"type": "ping", "id": len(waits)}))
                assert msgpack.unpackb(await asyncio.wait_for(ws.recv(), 5))["type"] == "pong"
                waits.append(asyncio.get_running_loop().time() - sent)
                await asyncio.sleep(0.01)
            return upload.result(), waits

    response, waits = asyncio.run(run())
    assert response.status_code == 201, response.text
    # The first ping goes out as the upload's thread starts, before the server has any of it: it
    # times this process starting that thread, not the server.
    assert len(waits) >= 5 and max(waits[1:]) < 0.1, (len(waits), waits[:3], max(waits[1:]))


def test_a_stored_voice_speaks_the_codes_of_voicewire_synth_and_of_qwen_tts(
    open_server, base_engine, tiny_checkpoints, oracle, tmp_path: Path
) -> None:
    """A voice cloned through POST /v1/voices, x-vector only and in context, spoken greedily by id
    on the socket and over HTTP, is the audio of the codes that `voicewire synth --ref-audio REF.wav
    [--ref-text TEXT] --greedy` and the official qwen-tts greedy generate_voice_clone give for that
    reference. Neither server path carries codes, so the chain is: socket PCM == HTTP PCM == the
    server's engine speaking the stored voice (its PCM, within float32 chunking noise), whose
    codes == synth's == qwen-tts's. Greedy speech of the random tiny model runs to the engine's KV bound (EOS does not
    come), so synth and qwen-tts are given as many frames as the server spoke, EOS left on."""
    from voicewire.server.cli import main

    reference = tmp_path / "ref.wav"
    reference.write_bytes(REFERENCE)
    jobs, ours = [], {}
    for name, ref_text in (("xvector", None), ("in_context", REF_TEXT)):
        made = _upload(open_server, **({} if ref_text is None else {"ref_text": ref_text}))
        assert made.status_code == 201, made.text
        voice_id = made.json()["id"]
        stored = asyncio.run(open_server.library.resolve(voice_id, ANONYMOUS_CALLER))
        codes, pcm = _direct(base_engine, voice=stored, max_frames=None)
        frames = codes.shape[0]
        assert 8 <= frames < base_engine.config.kv_length, frames  # the prompt fits, and speech follows

        heard = _speak_on_socket(open_server, {"id": voice_id}, max_frames=None)
        # The same codes, decoded in chunks that may differ with timing: a decoder that fell behind
        # takes several chunks' frames at once, and a talker that ran out of text before the
        # socket's `end` (a message after its text) drains a shorter chunk. The decoder's float32
        # sums then differ in the last bits (its chunks equal one decode within 1e-5:
        # tests/engine/runtime/test_engine.py); other codes would differ by tenths.
        assert isinstance(heard, np.ndarray) and heard.shape == pcm.shape, name
        assert np.abs(heard - pcm).max() < 1e-5, name
        speech = httpx.post(
            f"{open_server.http}/v1/audio/speech",
            json={"input": TEXT, "voice": voice_id, "response_format": "pcm", "greedy": True},
            timeout=120,
        )
        assert speech.status_code == 200, speech.text
        pcm16 = (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype(np.int32)
        got16 = np.frombuffer(speech.content, "<i2").astype(np.int32)
        assert got16.shape == pcm16.shape and np.abs(got16 - pcm16).max() <= 1, name  # as above, rounded

        argv = ["synth", "--model", str(tiny_checkpoints["base"]), "--text", TEXT]
        argv += ["--ref-audio", str(reference), *(["--ref-text", ref_text] if ref_text else [])]
        codes_out = tmp_path / f"{name}.npy"
        argv += ["--greedy", "--max-frames", str(frames), "--out", str(tmp_path / f"{name}.wav")]
        assert main([*argv, "--codes-out", str(codes_out)]) == 0
        synth = np.load(codes_out)
        assert synth.shape == codes.shape and np.array_equal(synth, codes), name
        ours[name] = codes
        job = {"name": name, "model": str(tiny_checkpoints["base"]), "kind": "voice_clone", "text": TEXT}
        job |= {"language": "auto", "ref_audio": str(reference), "non_streaming_mode": False}
        job |= {"ref_text": ref_text, "x_vector_only": ref_text is None, "max_new_tokens": frames + 1}
        jobs.append(job)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    oracle("synthesize.py", str(tmp_path / "jobs.json"), str(tmp_path))
    for name, codes in ours.items():
        theirs = np.load(tmp_path / f"{name}.npz")["codes"]
        assert theirs.shape == codes.shape and np.array_equal(theirs, codes), name
    assert not np.array_equal(ours["xvector"][:8], ours["in_context"][:8])  # the reference codes count
