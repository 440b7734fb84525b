"""The player and the demo page in a real headless Chromium (Debian's), driven by playwright-core."""

import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import soxr

from tests.server.conftest import running_server
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.synthesis import SynthesisRequest, synthesize
from voicewire.server.config import ServerConfig

HERE = Path(__file__).parent
ARTIFACTS = Path(os.environ.get("VOICEWIRE_ARTIFACTS", HERE.parents[1] / "artifacts"))


@pytest.fixture(scope="module")
def server():
    # The built-in tiny checkpoint, as `make serve` runs it (the demo page shows its banner).
    with running_server(Qwen3TTS.load("tiny"), ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def base_server(tiny_models, tmp_path_factory):
    # A Base checkpoint clones; behind an API key, so the page acts with a browser token.
    config = ServerConfig(api_keys=("key-demo-1234",), data_dir=str(tmp_path_factory.mktemp("voices")))
    with running_server(tiny_models["base"], config) as running:
        yield running


def _browse(server, scenario: str, **env: str) -> dict:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["node", str(HERE / "browser.mjs"), server.http, scenario, str(ARTIFACTS)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=HERE,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_typing_streams_audio_before_the_text_is_finished(server) -> None:
    seen = _browse(server, "typing")
    assert seen["codec"] == "opus", seen["logs"]  # WebCodecs decodes the Opus packets
    assert seen["firstAudioAfterTypingStartMs"] < seen["typingEndedAt"]  # audio while still typing
    stats, done = seen["stats"], seen["done"]
    # Typed text and a CPU engine beside Chromium can fall behind real time, and then the player
    # rightly runs dry. What it must never do is run dry holding audio: every underrun comes when
    # everything that had arrived (150 ms earlier: the report lags up to 50 ms, decoding a little)
    # has been played, but for the Opus decoder's lookahead (312 samples at 48 kHz: the end of one
    # packet comes out of the decoder with the next; one packet of slack covers it).
    for at, played in seen["underrunsAt"]:
        arrived = max((total for t, total in seen["arrivedAt"] if t <= at - 150), default=0)
        assert arrived - 960 <= played, (at, played, seen["arrivedAt"])
    assert stats["latencyMs"] is not None and stats["latencyMs"] > 0
    # Every sample the server reported was rendered. The typing can outlast the turn's 30 frames
    # (the server then ends it) and the words after that are a second turn, so: every turn's.
    assert seen["dones"] == [f"turn-{n}" for n in range(1, len(seen["dones"]) + 1)], seen["dones"]
    assert stats["played"] == seen["doneSamples"] >= done["samples"] > 0
    assert (ARTIFACTS / "demo-typing.png").stat().st_size > 10_000
    (ARTIFACTS / "latency.json").write_text(json.dumps({"latency_at_speaker_ms": stats["latencyMs"]}))


def test_rendered_audio_is_the_servers_audio(server) -> None:
    # A known waveform through the real Opus path: the engine's greedy audio for a fixed text.
    text = "The quick brown fox jumps over the lazy dog."
    seen = _browse(server, "fidelity", FIDELITY_TEXT=text)
    rendered = np.asarray(seen["rendered"], dtype=np.float32)
    assert rendered.shape[0] == seen["done"]["samples"] == 24 * 1920 * 2  # every sample, no more
    request = SynthesisRequest(
        text=text, speaker=seen["voice"], language="auto", layout="dual_track", greedy=True, max_frames=24
    )
    source = soxr.resample(synthesize(server.engine.model, request).audio, 24000, 48000)
    lags = range(-960, 961, 8)
    best = max(lags, key=lambda lag: np.dot(np.roll(rendered, lag), source))
    aligned = np.roll(rendered, best)
    correlation = float(np.corrcoef(aligned[2000:-2000], source[2000:-2000])[0, 1])
    assert correlation >= 0.9, (correlation, best)
    (ARTIFACTS / "fidelity.json").write_text(json.dumps({"correlation": correlation, "lag_samples": best}))


def test_a_turn_opened_the_moment_the_last_is_done_loses_none_of_its_audio(server) -> None:
    # The Opus decoder still holds the done turn's last packet and lookahead (312 samples) when
    # the next turn opens; they play before the next turn's audio.
    seen = _browse(server, "back-to-back")["seen"]
    assert seen["dones"] == ["turn-1", "turn-2"] and seen["errors"] == []
    assert seen["stats"]["played"] == seen["doneSamples"] == 2 * 12 * 1920 * 2  # 12 frames a turn, at 48 kHz


def test_pcm_fallback_plays_too(server) -> None:
    seen = _browse(server, "pcm")
    assert seen["codec"] == "pcm"
    assert seen["dones"] == [f"turn-{n}" for n in range(1, len(seen["dones"]) + 1)], seen["dones"]
    # Every sample of every turn, through PCM.
    assert seen["stats"]["played"] == seen["doneSamples"] >= seen["done"]["samples"] > 0


BARGE_IN_TEXT = "This turn goes on and on, long enough that it is still playing when we interrupt it. " * 4


def test_barge_in_silences_within_50_ms_and_shows_what_was_heard(server) -> None:
    seen = _browse(server, "barge-in")
    assert seen["lastRenderMsAfterCancel"] <= 50, seen
    assert seen["stats"]["bufferMs"] == 0
    # The player reported its playback as it cancelled: the server's heard_samples are what had
    # played then (its count lags the worklet's by at most one report), and heard_text the words
    # that began before them, which the demo page shows.
    cancelled, played = seen["cancelled"], seen["playedAtCancel"]
    assert played - 48000 * 0.3 <= cancelled["heard_samples"] <= played, (cancelled, played)
    heard = cancelled["heard_text"]
    assert heard and BARGE_IN_TEXT.startswith(heard) and len(heard) < len(BARGE_IN_TEXT), heard
    assert seen["heard"].startswith("Heard before the barge-in (") and seen["heard"].endswith(
        f" s): “{heard}”"
    )


def test_the_demo_page_takes_turns_stops_and_explains(server) -> None:
    seen = _browse(server, "turns")
    assert seen["favicon"] == 200
    assert seen["banner"].startswith(
        "This server runs the built-in tiny checkpoint: its random weights make noise"
    )
    # The CustomVoice checkpoint cannot clone: the panel says why, with no form; speakers can't be deleted.
    assert seen["clone"] == {
        "panelHidden": False,
        "formHidden": True,
        "reason": "Cloning needs a Base checkpoint; this server runs a CustomVoice one.",
        "deleteHidden": True,
    }
    assert seen["seen"]["dones"][:2] == ["turn-1", "turn-2"]  # the text typed after Speak: turn 2
    assert seen["errorsAfterTurns"] == ["unknown_type"]  # and no context_closed
    # Later, "Simulate LLM" types for 400 ms into turns of 12 frames (maxFrames): a word that
    # reaches a turn the engine has just ended at max_frames, before its `done` is out, is answered
    # context_closed (docs/protocol.md), and the words after the `done` open the next turn.
    assert set(seen["seen"]["errors"][1:]) <= {"context_closed"}
    assert seen["statusAfterTurns"] == "connected (opus)"
    assert seen["errorStatus"].startswith("error: ") and "bogus" in seen["errorStatus"]  # words, not a code
    assert seen["statusAfterAction"] == "connected (opus)"  # cleared by the next action
    typed, later = seen["simulated"]
    assert 0 < typed == later  # Stop ended the simulated LLM
    # Stop after the third turn's `done`, while it still plays: the player cancels it all the same,
    # silencing it, and the server says what was heard of it (nothing dropped: all was sent).
    late = seen["late"]
    assert late["cancelled"]["context_id"] == seen["third"] == late["done"]["context_id"]
    assert late["cancelled"]["samples_dropped"] == 0 and late["bufferMs"] == 0
    assert seen["lateAt"] <= late["cancelled"]["heard_samples"] < late["done"]["samples"]
    assert late["heard"].endswith(f"“{late['cancelled']['heard_text']}”")
    states = seen["seen"]["states"]
    assert states[0] == "idle" and "listening" in states and "speaking" in states


def _reference(path: Path, seconds: float) -> Path:
    t = np.arange(int(seconds * 24000)) / 24000
    wave = 0.3 * np.sin(2 * np.pi * 170 * t) + 0.05 * np.random.default_rng(3).standard_normal(t.shape)
    sf.write(path, wave.astype(np.float32), 24000, subtype="PCM_16")
    return path


def test_the_demo_page_clones_a_voice_and_speaks_with_it(base_server, tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {base_server.config.api_keys[0]}"}
    token = httpx.post(f"{base_server.http}/v1/tokens", headers=auth).json()["token"]
    seen = _browse(
        base_server,
        "clone",
        PAGE_PARAMS=f"&token={token}",
        REFERENCE_WAV=str(_reference(tmp_path / "ada.wav", 1.5)),
        REFERENCE_TEXT="A short reference sentence.",
        SHORT_WAV=str(_reference(tmp_path / "short.wav", 0.5)),
    )
    # A Base checkpoint has no speakers: no session until a voice is cloned.
    before = seen["before"]
    assert before["voices"] == [] and before["speakDisabled"] and before["deleteHidden"], before
    assert not before["formHidden"] and before["reasonHidden"]
    assert before["status"] == "no voice yet: clone one below"
    # The server's refusal, in its words, until the next action (picking another file).
    assert seen["tooShort"]["status"] == "error: the reference is 0.50 s long; at least 1 s is needed"
    assert seen["tooShort"]["voices"] == []
    assert seen["picked"]["status"] == "no voice yet: clone one below"
    assert seen["picked"]["reference"].startswith("ada.wav (")
    # Cloned (in context: the reference text went with it), added to the picker and chosen.
    cloned = seen["cloned"]
    ada = cloned["selected"]
    assert ada.startswith("voice_") and cloned["voices"] == [[ada, "Ada (cloned)"]]
    assert (
        cloned["status"] == "connected (opus)" and not cloned["speakDisabled"] and not cloned["deleteHidden"]
    )
    assert cloned["reference"] == "Cloned “Ada” from 1.5 s of audio and its text."
    # The turn was spoken on a socket whose start named the cloned voice: all its audio came there.
    spoken = seen["spoken"]
    in_ada = [s for s in seen["sockets"] if s["voice"] == {"id": ada, "language": "auto"}]
    assert len(in_ada) == 2  # the turn's, and the one chosen again to delete it
    socket = in_ada[0]
    assert [d["context_id"] for d in socket["done"]] == [spoken["context_id"]]
    assert socket["audio"][spoken["context_id"]] == spoken["samples"] == 12 * 1920 * 2  # 12 frames, 48 kHz
    # The microphone (Chromium's fake one): a take with a running clock, sent as WAV and cloned.
    assert seen["recording"]["reference"].startswith("Recording… ")
    recorded = float(seen["recorded"]["reference"].removeprefix("Recorded ").removesuffix(" s."))
    assert 1.5 <= recorded <= 10, seen["recorded"]  # 1.8 s and more: the click comes late on a busy machine
    mic = seen["micCloned"]
    assert mic["voices"] == [[ada, "Ada (cloned)"], [mic["selected"], "Mic (cloned)"]]
    said = re.fullmatch(r"Cloned “Mic” from ([0-9.]+) s of audio\.", mic["reference"])  # no reference text
    assert said and abs(float(said[1]) - recorded) <= 0.1, mic["reference"]  # each rounded to 0.1 s
    # Deleted from the picker and from the server; the page speaks in the one left.
    deleted = seen["deleted"]
    assert deleted["voices"] == [[mic["selected"], "Mic (cloned)"]] and deleted["selected"] == mic["selected"]
    listed = httpx.get(f"{base_server.http}/v1/voices", headers=auth).json()
    assert [v["id"] for v in listed["stored"]] == [mic["selected"]]
    assert httpx.get(f"{base_server.http}/v1/voices/{ada}", headers=auth).status_code == 404
    assert seen["sockets"][-1]["voice"] == {"id": mic["selected"], "language": "auto"}
    assert seen["sockets"][-1]["ready"]
