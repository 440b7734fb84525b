"""The player and the demo page in a real headless Chromium (Debian's), driven by playwright-core."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soxr

from tests.server.conftest import running_server
from voicewire.engine.model import Qwen3TTS, SynthesisRequest
from voicewire.server.config import ServerConfig

HERE = Path(__file__).parent
ARTIFACTS = Path(os.environ.get("VOICEWIRE_ARTIFACTS", HERE.parents[1] / "artifacts"))


@pytest.fixture(scope="module")
def server():
    # The built-in tiny checkpoint, as `make serve` runs it (the demo page shows its banner).
    with running_server(Qwen3TTS.load("tiny"), ServerConfig()) as running:
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
    assert stats["played"] == done["samples"]  # every sample the server reported was rendered
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
    source = soxr.resample(server.engine.model.synthesize(request).audio, 24000, 48000)
    lags = range(-960, 961, 8)
    best = max(lags, key=lambda lag: np.dot(np.roll(rendered, lag), source))
    aligned = np.roll(rendered, best)
    correlation = float(np.corrcoef(aligned[2000:-2000], source[2000:-2000])[0, 1])
    assert correlation >= 0.9, (correlation, best)
    (ARTIFACTS / "fidelity.json").write_text(json.dumps({"correlation": correlation, "lag_samples": best}))


def test_pcm_fallback_plays_too(server) -> None:
    seen = _browse(server, "pcm")
    assert seen["codec"] == "pcm"
    assert seen["stats"]["played"] == seen["done"]["samples"] > 0  # every sample, through PCM


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
    assert seen["seen"]["dones"][:2] == ["turn-1", "turn-2"]  # the text typed after Speak: turn 2
    assert seen["seen"]["errors"] == ["unknown_type"]  # and no context_closed
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
