"""voicewire.integrations.livekit under the real LiveKit Agents (livekit-agents, pinned, in its own
venv) against a real `voicewire serve` with the tiny checkpoint and an API key: streamed audio is
the socket's audio, timed transcripts are the server's word timing, closing a stream mid-turn
cancels its context, synthesize() speaks, a restarted server is joined on the next turn, and a
refused key is an error LiveKit does not retry.

One driver run (tests/integrations/livekit/drive.py) plays every turn on one TTS, and the server
is restarted while it waits between its last two turns; the tests below read what it saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.frameworks_env import REPO, framework_python, run_framework
from tests.serve import Served, voicewire_serve
from voicewire.client import Client

# One venv for every LiveKit test: voicewire's plugin here, ElevenLabs' plugin and the official
# elevenlabs SDK in tests/integrations/test_elevenlabs_clients.py.
LIVEKIT = ["livekit-agents==1.8.2", "livekit-plugins-elevenlabs==1.8.2", "elevenlabs==2.78.0"]
KEY = "livekit-test-key"
VOICE = "ryan"
RATE = 16000  # not the model's 24 kHz: the server resamples, and the plugin asks for this rate
SEED = 1234
# Random weights never say end of speech: the speech guard ends each turn, after about 3 s plus
# 0.5 s a text token, so the texts are short. The pieces split words, as LLM tokens do.
PIECES = ["Hi ", "the", "re."]
SHORT = "Hi."
INTERRUPT = "Hi there, this turn is cut off."
# AudioEmitter holds back a 10 ms tail to mark the segment's last frame; when its timer already
# flushed that tail (audio slower than real time, as on a loaded CPU), it ends the segment with
# 10 ms of silence of its own instead.
MARKER = RATE // 100


@dataclass
class Run:
    driver: dict[str, Any]  # the driver's JSON
    pcm: np.ndarray  # the streamed turn's audio, int16
    reference: np.ndarray  # the same text, voice and seed on the socket, int16
    reference_words: list[dict[str, Any]]


async def _socket_turn(url: str) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """PIECES on the socket as the plugin sends them (text pieces, flush, end), same `start`."""
    async with await Client.connect(
        url,
        api_key=KEY,
        voice={"speaker": VOICE},
        format={"encoding": "pcm_s16le", "sample_rate": RATE},
        sampling={"seed": SEED},
        timestamps="words",
    ) as client:
        context = client.context()
        for piece in PIECES:
            await context.push(piece)
        await context.flush()
        await context.end()
        audio = await context.read_all()
        return np.round(audio * 32767).astype(np.int16), context.words


def _when(path: Path, driven: Future) -> None:
    """Wait for the driver to write `path` (its failure raises here)."""
    while not path.exists():
        if driven.done():
            driven.result()
            raise AssertionError(f"the driver ended without writing {path.name}")
        time.sleep(0.1)


def _stop(served: Served) -> None:
    os.killpg(served.process.pid, signal.SIGTERM)
    served.process.wait(timeout=60)


@pytest.fixture(scope="module")
def run(tiny_checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Run:
    python = framework_python("livekit", LIVEKIT)
    out = tmp_path_factory.mktemp("livekit")
    serve = ("--model", str(tiny_checkpoints["custom_voice"]), "--data-dir", str(out / "data"))
    log, env = out / "serve.log", {"VOICEWIRE_API_KEYS": KEY}
    config = {
        "url": "",
        "key": KEY,
        "voice": VOICE,
        "rate": RATE,
        "seed": SEED,
        "pieces": PIECES,
        "short": SHORT,
        "interrupt": INTERRUPT,
        "example": str(REPO / "examples" / "livekit_agent.py"),
    }
    with voicewire_serve(*serve, log=log, env=env) as served, ThreadPoolExecutor(1) as pool:
        reference, words = asyncio.run(_socket_turn(served.url))
        config["url"] = served.url
        driven = pool.submit(
            run_framework, python, "livekit/drive.py", json.dumps(config), str(out), timeout=400
        )
        _when(out / "stopping", driven)
        _stop(served)
        with voicewire_serve(*serve, log=log, env=env, port=served.port):
            (out / "restarted").touch()
            driver, _ = driven.result()
    pcm = np.frombuffer((out / "stream.pcm").read_bytes(), np.int16)
    return Run(driver, pcm, reference, words)


def _done(run: Run) -> list[int]:
    """The samples of the server's `done` messages, in turn order: stream, next, synthesize,
    restarted."""
    return [m["samples"] for m in run.driver["messages"] if m["type"] == "done"]


def _all_of(samples: int, done: int) -> bool:
    """The framework got all `done` samples of a turn (and perhaps AudioEmitter's marker)."""
    return done > RATE and samples in (done, done + MARKER)


def test_streamed_audio_is_the_sockets_audio(run: Run) -> None:
    frames = run.driver["stream"]["frames"]
    assert {rate for _, _, rate in frames} == {RATE}
    assert [final for _, final, _ in frames].count(True) == 1 and frames[-1][1]
    pcm = run.pcm
    if len(pcm) == len(run.reference) + MARKER and not pcm[-MARKER:].any():
        pcm = pcm[:-MARKER]
    assert len(run.reference) == _done(run)[0] > RATE  # over a second of audio
    assert np.array_equal(pcm, run.reference)


def test_timed_transcripts_are_the_servers_words(run: Run) -> None:
    words = run.driver["stream"]["words"]
    assert "".join(text for text, _, _ in words) == "".join(PIECES)
    assert [text.strip() for text, _, _ in words] == [w["text"] for w in run.reference_words]
    assert [(start, end) for _, start, end in words] == [
        (w["start"] / RATE, w["end"] / RATE) for w in run.reference_words
    ]
    starts = [start for _, start, _ in words]
    assert starts == sorted(starts) and all(start < end for _, start, end in words)
    assert 0 <= starts[0] and words[-1][2] == len(run.reference) / RATE


def test_closing_a_stream_cancels_its_context_and_the_next_turn_plays(run: Run) -> None:
    interrupt, messages = run.driver["interrupt"], run.driver["messages"]
    ours = [(i, m["type"]) for i, m in enumerate(messages) if m["context_id"] == interrupt["context_id"]]
    kinds = [kind for _, kind in ours]
    assert interrupt["first_frame"] > 0 and "audio" in kinds
    assert kinds.count("cancelled") == 1 and "done" not in kinds and "error" not in kinds
    cancelled = next(i for i, kind in ours if kind == "cancelled")
    assert cancelled >= interrupt["closed_at"]  # the server's answer to the close
    assert all(kind != "audio" for i, kind in ours if i > cancelled)
    # The next turn plays in full, on the same socket as every turn before the restart.
    assert _all_of(run.driver["next"]["samples"], _done(run)[1])
    assert run.driver["sockets_before_restart"] == 1


def test_synthesize_speaks(run: Run) -> None:
    synthesized = run.driver["synthesize"]
    assert _all_of(synthesized["samples"], _done(run)[2])
    assert "".join(text for text, _, _ in synthesized["words"]) == SHORT


def test_a_restarted_server_is_joined_on_the_next_turn(run: Run) -> None:
    assert run.driver["sockets"] == 2
    assert len(_done(run)) == 4
    assert _all_of(run.driver["restarted"]["samples"], _done(run)[3])


def test_a_refused_key_is_a_clear_error_livekit_does_not_retry(run: Run) -> None:
    refused = run.driver["refused"]
    assert refused["raised"]["type"] == "APIStatusError"
    assert refused["raised"]["status_code"] == 401 and refused["raised"]["retryable"] is False
    assert "unauthorized" in refused["raised"]["message"] and "api_key" in refused["raised"]["message"]
    assert refused["events"] == [{"recoverable": False, "error": "APIStatusError"}]  # one try
    assert refused["seconds"] < 5


def test_the_example_agent_imports(run: Run) -> None:
    assert run.driver["example"] == {"server": "AgentServer", "entrypoint": "entrypoint"}
