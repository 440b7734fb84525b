"""`text.speed` on a real server (tiny checkpoint, CPU): a context's audio is its speed-1 audio
time-stretched (server/tempo.py), and every count the client sees (word times, `done.samples`,
what `cancelled` says was heard) is on the stretched timeline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.server.conftest import RunningServer, serving
from tests.server.wsclient import JSON, MSGPACK, WireClient
from voicewire.client import Client
from voicewire.engine import Engine, EngineConfig
from voicewire.engine.config import SpeechGuard
from voicewire.server.config import ServerConfig
from voicewire.server.tempo import TimeStretch

START = {
    "voice": {"speaker": "vivian", "language": "english"},
    "sampling": {"seed": 11},
    "format": {"encoding": "pcm_f32le", "sample_rate": 24000},
    "timestamps": "words",
}
TEXT = "Hello there, this is a test. How are you?"
SECOND = " And one more thing to say."


@pytest.fixture(scope="module")
def server(tiny_models) -> Iterator[RunningServer]:
    """A short speech guard: random weights never say end of speech, and a flushed segment must
    end (the guard ends it) for its `flushed` to come before the context's end."""
    guard = SpeechGuard(after_text_s=0.4, per_token_s=0.02)
    config = EngineConfig(max_streams=8, kv_length=256, speech_guard=guard)
    with (
        Engine(tiny_models["custom_voice"], config) as engine,
        serving(engine, ServerConfig(send_queue=4096)) as running,
    ):
        yield running


async def _speak(url: str, speed: float | None, flush_first: bool = False) -> list[dict[str, Any]]:
    """TEXT in one message (then SECOND after a flush, with `flush_first`), then end: every message
    of the context through its `done`."""
    client = await WireClient.open(url, MSGPACK)
    try:
        await client.start(**START)
        first: dict[str, Any] = {"type": "text", "context_id": "c", "text": TEXT, "flush": flush_first}
        if speed is not None:
            first["speed"] = speed
        await client.send(first)
        if flush_first:
            await client.send({"type": "text", "context_id": "c", "text": SECOND})
        await client.send({"type": "end", "context_id": "c"})
        done, seen = await client.until(lambda m: m["type"] in ("done", "error"))
        assert done["type"] == "done", done
        return [*seen, done]
    finally:
        await client.close()


def _pcm(messages: list[dict[str, Any]]) -> np.ndarray:
    return np.frombuffer(b"".join(m["data"] for m in messages if m["type"] == "audio"), "<f4")


def _words(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for m in messages if m["type"] == "words" for w in m["words"]]


@pytest.fixture(scope="module")
def normal(server) -> list[dict[str, Any]]:
    return asyncio.run(_speak(server.url, None))


@pytest.mark.parametrize("speed", [1.5, 0.75])
def test_the_audio_is_the_speed_1_audio_stretched_and_so_are_the_word_times(server, normal, speed) -> None:
    seen = asyncio.run(_speak(server.url, speed))
    base, pcm = _pcm(normal), _pcm(seen)
    assert base.size > 24000  # over a second
    np.testing.assert_array_equal(pcm, TimeStretch(speed).process(base, final=True))
    assert pcm.size == round(base.size / speed)
    done = seen[-1]
    assert done["samples"] == pcm.size and done["seconds"] == round(pcm.size / 24000, 4)
    words, base_words = _words(seen), _words(normal)
    assert [w["text"] for w in words] == [w["text"] for w in base_words] == TEXT.split()
    for word, at_1 in zip(words, base_words, strict=True):
        # Each is rounded on its own (the position, the lag): within a sample or two.
        assert abs(word["start"] - at_1["start"] / speed) <= 2, (word, at_1)
        assert abs(word["end"] - at_1["end"] / speed) <= 2, (word, at_1)
    assert words[-1]["end"] == done["samples"]
    sent = 0
    for message in seen:  # a word goes out once its start is in the audio sent
        sent += message["samples"] if message["type"] == "audio" else 0
        assert all(w["start"] <= sent for w in message.get("words", []))


def test_speed_1_is_the_audio_without_a_speed(server, normal) -> None:
    seen = asyncio.run(_speak(server.url, 1))
    assert _pcm(seen).tobytes() == _pcm(normal).tobytes()
    assert _words(seen) == _words(normal)


def test_a_flush_ends_a_stretch_so_its_audio_is_all_out_at_flushed(server) -> None:
    """The stretch runs about 80 ms behind; at a flush it is flushed and starts again, so `flushed`
    comes with all the audio before it, and the audio is the two stretches end to end."""
    speed = 1.25
    normal, seen = (asyncio.run(_speak(server.url, s, flush_first=True)) for s in (None, speed))
    base, pcm = _pcm(normal), _pcm(seen)
    cut = next(m["pts"] for m in normal if m["type"] == "flushed")
    assert 0 < cut < base.size  # the second text goes on after the flush
    expected = np.concatenate(
        [TimeStretch(speed).process(part, final=True) for part in (base[:cut], base[cut:])]
    )
    np.testing.assert_array_equal(pcm, expected)
    sent = 0
    for message in seen:
        sent += message["samples"] if message["type"] == "audio" else 0
        if message["type"] == "flushed":
            assert message["pts"] == sent == round(cut / speed)
    words = _words(seen)
    assert [w["text"] for w in words] == (TEXT + SECOND).split()
    for word, at_1 in zip(words, _words(normal), strict=True):
        assert abs(word["start"] - at_1["start"] / speed) <= 2, (word, at_1)


def test_a_bad_speed_is_refused_and_a_context_keeps_the_speed_it_opened_with(server) -> None:
    async def run() -> tuple[list[dict], list[dict]]:
        client = await WireClient.open(server.url, JSON)
        try:
            await client.start(**START)
            refused = []
            for speed in (5, 0.2, "fast", True):
                await client.send({"type": "text", "context_id": "c", "text": "Hi. ", "speed": speed})
                refused.append(await client.recv())
            # None of those opened the context: this one does, at 2; a repeat of 2 is taken.
            await client.send({"type": "text", "context_id": "c", "text": "Hello there. ", "speed": 2})
            await client.send({"type": "text", "context_id": "c", "text": "And more, ", "speed": 2})
            await client.send({"type": "text", "context_id": "c", "text": "faster. ", "speed": 3})
            await client.send({"type": "end", "context_id": "c"})
            done, seen = await client.until(lambda m: m["type"] == "done")
            return refused, [*seen, done]
        finally:
            await client.close()

    refused, seen = asyncio.run(run())
    assert [e["code"] for e in refused] == ["invalid_message"] * 4
    assert all(e["context_id"] == "c" and not e["fatal"] and "speed" in e["message"] for e in refused)
    assert "less than or equal to 4" in refused[0]["message"]
    assert "greater than or equal to 0.25" in refused[1]["message"]
    errors = [m for m in seen if m["type"] == "error"]
    assert len(errors) == 1 and errors[0]["code"] == "invalid_options"
    assert "speed 2" in errors[0]["message"] and not errors[0]["fatal"]
    assert seen[-1]["samples"] > 0


@pytest.mark.parametrize("speed", [1.5, 0.75])
def test_cancel_hears_the_words_begun_before_the_played_sample_of_the_stretched_audio(
    server, normal, speed
) -> None:
    """The listener reports a sample just inside the second word of the stretched audio (where the
    speed-1 audio has it, over the speed): the heard text runs through that word (on the engine's
    timeline it would be the first, or the third)."""
    played = round(_words(normal)[1]["start"] / speed) + 3

    async def run() -> tuple[list[dict], int, dict]:
        client = await WireClient.open(server.url, MSGPACK)
        try:
            await client.start(**START)
            await client.send(
                {"type": "text", "context_id": "c", "text": TEXT, "flush": True, "speed": speed}
            )
            sent, words = 0, []
            while len(words) < 3:
                message = await client.recv()
                assert message["type"] in ("audio", "progress", "words", "flushed"), message
                sent += message["samples"] if message["type"] == "audio" else 0
                words += message.get("words", [])
            await client.send({"type": "playback", "context_id": "c", "played_samples": played})
            await client.send({"type": "cancel", "context_id": "c"})
            cancelled, seen = await client.until(lambda m: m["type"] == "cancelled")
            sent += sum(m["samples"] for m in seen if m["type"] == "audio")
            return words, sent, cancelled
        finally:
            await client.close()

    words, sent, cancelled = asyncio.run(run())
    assert words[1]["start"] < played < words[2]["start"]
    assert cancelled["heard_samples"] == played
    assert cancelled["heard_text"] == TEXT[: words[1]["end_char"]]
    assert cancelled["samples_generated"] - cancelled["samples_dropped"] == sent


def test_the_python_client_sends_a_contexts_speed(server, normal) -> None:
    async def run() -> np.ndarray:
        start = {k: v for k, v in START.items() if k not in ("voice", "format")}
        async with await Client.connect(
            server.url, voice=START["voice"], format=START["format"], **start
        ) as client:
            context = client.context(speed=1.5)
            await context.push(TEXT)
            await context.end()
            return await context.read_all()

    np.testing.assert_array_equal(asyncio.run(run()), TimeStretch(1.5).process(_pcm(normal), final=True))
