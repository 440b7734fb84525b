"""voicewire.integrations.pipecat in a real Pipecat pipeline (pipecat-ai, pinned, in its own venv)
against a real `voicewire serve` with the tiny checkpoint: the pipeline's audio is the socket's
audio, word timestamps arrive in order within it, barge-in cancels the turn on the server, a
restarted server is joined on the next turn, and a refused key is a clear permanent error."""

from __future__ import annotations

import json
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.frameworks_env import REPO, framework_python, run_framework
from tests.serve import Served, voicewire_serve
from tests.v1_reference import assert_same_start, v1_pcm16
from tests.venvs import run_script

PIPECAT = ["pipecat-ai==1.14.0"]
EXAMPLE = REPO / "examples" / "pipecat_bot.py"
RATE = 16000  # the pipeline's output rate: the server resamples, and the plugin asks for it
SEED = 1234
KEY = "pipecat-test-key"
# Random weights never say end of speech: the speech guard ends each turn, after about 3 s plus
# 0.5 s a text token. Short texts keep the turns short.
SENTENCES = ["Hello there. ", "How are you?"]
TOKENS = ["Hel", "lo ", "there, ", "fri", "end."]
CHINESE = ["你好，", "朋友。"]  # a word a character: Pipecat joins these without spaces


@pytest.fixture(scope="module")
def pipecat_python() -> Path:
    return framework_python("pipecat", PIPECAT)


@pytest.fixture(scope="module")
def server(tiny_checkpoints, tmp_path_factory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("pipecat-server") / "serve.log"
    args = ("--model", str(tiny_checkpoints["custom_voice"]))
    with voicewire_serve(*args, log=log, env={"VOICEWIRE_API_KEYS": KEY}) as served:
        yield served


def _drive(python: Path, config: dict, out: Path, timeout: float = 400) -> list[dict]:
    result, _ = run_framework(python, "pipecat/drive.py", json.dumps(config), str(out), timeout=timeout)
    return result["turns"]


def _pcm(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.int16)


def _check_words(turn: dict, text: str, samples: int) -> None:
    """Word frames join back into the turn's text, in order, timed as the server timed them (Pipecat
    counts from the turn's first audio), within the turn's audio."""
    joined = "".join(w + ("" if own_spacing else " ") for w, _, own_spacing in turn["words"])
    assert joined.strip() == text.strip()
    sent = [w for m in turn["messages"] if m["type"] == "words" for w in m["words"]]
    assert [w["text"] for w in sent] == [w for w, _, _ in turn["words"]]
    times = [pts for _, pts, _ in turn["words"]]
    assert times == sorted(times) and sent[-1]["start"] < samples
    for (_, pts, _), word in zip(turn["words"], sent, strict=True):
        offset = (word["start"] - sent[0]["start"]) / RATE * 1e9
        assert abs((pts - times[0]) - offset) < 1e6  # within a millisecond


@pytest.mark.parametrize(
    ("pieces", "tokens"),
    [(SENTENCES, False), (TOKENS, True), (CHINESE, True)],
    ids=["sentences", "tokens", "chinese"],
)
def test_a_turn_plays_the_sockets_audio_with_word_timing(
    pipecat_python, server, tmp_path, pieces, tokens
) -> None:
    config = {"url": server.url, "api_key": KEY, "voice": "ryan", "seed": SEED, "sample_rate": RATE}
    config["tokens"] = tokens
    (turn,) = _drive(pipecat_python, {**config, "turns": [{"pieces": pieces}]}, tmp_path)
    assert turn["rates"] == [RATE] and turn["errors"] == []
    # What the model read: Pipecat's text as the service sent it (sentences with a space after).
    text = "".join(m["text"] for m in turn["messages"] if m["type"] == "progress")
    assert text.split() == "".join(pieces).split()
    heard = _pcm(tmp_path / "turn0.pcm")
    expected = v1_pcm16(server.url, text, speaker="ryan", rate=RATE, api_key=KEY, sampling={"seed": SEED})
    assert_same_start(heard, expected, more_than=2 * RATE)  # seconds of it: the guard's 3 s and more
    kinds = [m["type"] for m in turn["messages"]]
    assert kinds[-1] == "done" and "words" in kinds
    assert turn["messages"][-1]["samples"] == heard.size
    _check_words(turn, text, heard.size)


def test_barge_in_cancels_the_turn_and_the_next_one_plays(pipecat_python, server, tmp_path) -> None:
    long_text = "This reply is long enough to be cut off in the middle by the listener."
    config = {
        "url": server.url,
        "api_key": KEY,
        "voice": "ryan",
        "sample_rate": RATE,
        "turns": [
            {"pieces": [long_text], "interrupt_after_audio": True},
            {"pieces": ["And now the next turn."]},
        ],
    }
    cut, after = _drive(pipecat_python, config, tmp_path)
    kinds = [m["type"] for m in cut["messages"]]
    assert "cancelled" in kinds and "done" not in kinds
    context = cut["messages"][kinds.index("cancelled")]["context_id"]
    late = [m for m in cut["messages"][kinds.index("cancelled") :] if m["context_id"] == context]
    assert [m["type"] for m in late] == ["cancelled"]  # nothing of it after the cancel
    assert after["errors"] == [] and after["messages"][-1]["type"] == "done"
    assert _pcm(tmp_path / "turn1.pcm").size == after["messages"][-1]["samples"] > 0
    assert after["messages"][-1]["context_id"] != context


def test_a_restarted_server_is_joined_on_the_next_turn(pipecat_python, tiny_checkpoints, tmp_path) -> None:
    """The server stops between two turns and comes back on the same port: the second turn plays."""
    log = tmp_path / "serve.log"
    args = ("--model", str(tiny_checkpoints["custom_voice"]))
    config = {
        "voice": "ryan",
        "sample_rate": RATE,
        "turns": [{"speak": "First turn."}, {"speak": "Second turn.", "restart_before": True}],
    }
    with voicewire_serve(*args, log=log) as first:
        config["url"] = first.url
        result: dict = {}
        driver = threading.Thread(
            target=lambda: result.update(turns=_drive(pipecat_python, config, tmp_path)), daemon=True
        )
        driver.start()
        _wait_for(tmp_path / "stopping", driver)
    with voicewire_serve(*args, log=log, port=first.port):
        (tmp_path / "restarted").touch()
        driver.join(timeout=400)
    before, after = result["turns"]
    assert before["messages"][-1]["type"] == "done" and _pcm(tmp_path / "turn0.pcm").size > 0
    assert after["messages"][-1]["type"] == "done" and after["usable"]
    assert _pcm(tmp_path / "turn1.pcm").size == after["messages"][-1]["samples"] > 0


def test_a_refused_key_is_a_clear_permanent_error(pipecat_python, server, tmp_path) -> None:
    config = {
        "url": server.url,
        "voice": "ryan",
        "api_key": "wrong-key",
        "sample_rate": RATE,
        "turns": [{"speak": "Hello.", "expect_error": True}],
    }
    (turn,) = _drive(pipecat_python, config, tmp_path)
    assert any("voicewire refused the session: voicewire unauthorized" in e for e in turn["errors"]), turn[
        "errors"
    ]
    assert not turn["usable"] and turn["audio_frames"] == 0


def test_the_example_bot_writes_speech(pipecat_python, server, tmp_path) -> None:
    env = {"VOICEWIRE_API_KEY": KEY}  # the service's default key
    run_script(pipecat_python, EXAMPLE, server.url, "ryan", timeout=300, cwd=tmp_path, env=env)
    with wave.open(str(tmp_path / "pipecat_bot.wav")) as written:
        assert written.getframerate() == 24000 and written.getnframes() > 24000


def _wait_for(path: Path, driver: threading.Thread) -> None:
    deadline = time.monotonic() + 400
    while not path.exists():
        assert driver.is_alive(), "the driver ended before its turn"
        assert time.monotonic() < deadline
        time.sleep(0.1)
