"""The engine contract (engine/api.py), one suite for both implementations: the engine in this
process and the engine in a process of its own. Each test runs on both."""

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.engine.streaming import collect, feed, speak
from voicewire.engine import EngineClient, StreamHandle
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineFull, InvalidOptions, InvalidText, InvalidVoice, StreamClosed
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.engine.voice import Voice

TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun."
GREEDY = StreamOptions(greedy=True, max_frames=30, suppress_eos=True)
LONG = StreamOptions(max_frames=10_000, suppress_eos=True, seed=1)
KINDS = ["in_process", "engine_process"]


def _start(kind: str, config: EngineConfig, tiny_models, variant: str) -> Engine | EngineProcess:
    if kind == "in_process":
        return Engine(tiny_models[variant], config)
    return EngineProcess.start(config)


@pytest.fixture(scope="module", params=KINDS)
def client(request, tiny_checkpoints, tiny_models) -> Iterator[EngineClient]:
    config = EngineConfig(model=str(tiny_checkpoints["custom_voice"]), max_streams=3, kv_length=256)
    engine = _start(request.param, config, tiny_models, "custom_voice")
    yield engine
    engine.close()


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_both_satisfy_the_protocol_and_hand_out_one_handle_type(client: EngineClient) -> None:
    async def run():
        stream = client.open_stream(await client.voice(speaker="ryan"), GREEDY)
        stream.cancel()
        return stream, await stream.wait()

    stream, result = asyncio.run(run())
    assert type(stream) is StreamHandle and result.reason == "cancelled"
    assert client.healthy and client.info.variant == "custom_voice"


def test_a_stream_speaks_its_text_in_chunks(client: EngineClient) -> None:
    async def run():
        stream = client.open_stream(await client.voice(speaker="serena", language="english"), GREEDY)
        heard = await speak(stream, [TEXT[:30], TEXT[30:]])
        return heard, await stream.wait(), stream

    heard, result, stream = asyncio.run(run())
    assert heard.codes.shape == (30, 16) and heard.audio.shape == (30 * 1920,)
    assert result.reason == "max_frames" and result.samples_delivered == 30 * 1920
    assert stream.unread_samples == 0 and stream.consumed_samples == 30 * 1920
    assert "".join(c.text for c in heard.chunks) == TEXT[: heard.chunks[-1].text_end]
    _until(lambda: client.live_streams == 0)


def test_voices_are_awaited_kept_by_content_and_refused_clearly(client: EngineClient) -> None:
    async def run():
        first = await client.voice(speaker="aiden", language="english")
        again = await client.voice(language="english", speaker="aiden")
        other = await client.voice(speaker="aiden", language="chinese")
        await client.check_voice(first)
        return first, again, other

    first, again, other = asyncio.run(run())
    assert again is first and other is not first and other.language == "chinese"
    with pytest.raises(InvalidVoice, match="speaker embeddings are for Base checkpoints"):
        asyncio.run(client.voice(speaker="aiden", speaker_embedding=[0.5] * 64))
    with pytest.raises(InvalidVoice, match="unknown speaker 'nobody'"):
        asyncio.run(client.voice(speaker="nobody"))
    with pytest.raises(InvalidVoice, match="speaker embedding holds non-finite values"):
        asyncio.run(client.voice(speaker_embedding=[float("nan")] * 64))
    with pytest.raises(InvalidVoice, match="unknown speaker 'no one'"):
        asyncio.run(client.check_voice(Voice(speaker="no one")))


def test_a_voice_the_engine_refuses_fails_its_stream_only(client: EngineClient) -> None:
    async def run():
        bad = client.open_stream(Voice(speaker="nobody"))
        good = client.open_stream(await client.voice(speaker="ryan"), GREEDY)
        with pytest.raises(InvalidVoice, match="unknown speaker"):
            await collect(bad)
        heard = await speak(good, [TEXT])
        return await bad.wait(), heard

    result, heard = asyncio.run(run())
    assert result.reason == "error" and result.error is not None and result.error.code == "invalid_voice"
    assert heard.codes.shape == (30, 16)


def test_cancel_capacity_and_bad_requests(client: EngineClient) -> None:
    async def run():
        voice = await client.voice(speaker="vivian")
        streams = [client.open_stream(voice, LONG) for _ in range(3)]
        with pytest.raises(EngineFull, match="all 3 stream slots"):
            client.open_stream(voice)
        for s in streams:
            await feed(s, [TEXT * 3], end=False)
        first = await anext(streams[0])
        for s in streams:
            s.cancel()
        after = [chunk for s in streams async for chunk in s]
        results = [await s.wait() for s in streams]
        again = client.open_stream(voice, GREEDY)  # the slots are free again
        again.end()
        with pytest.raises(InvalidOptions, match="repetition_penalty must be > 0"):
            client.open_stream(voice, StreamOptions(repetition_penalty=0.0))
        return first, after, results, await again.wait(), streams[0], voice

    first, after, results, again, cancelled, voice = asyncio.run(run())
    assert first.frames == 1 and after == []
    assert [r.reason for r in results] == ["cancelled"] * 3 and again.reason == "end"
    with pytest.raises(StreamClosed, match="cancelled"):
        cancelled.push_text("more")
    with pytest.raises(RuntimeError, match="inside a running asyncio event loop"):
        client.open_stream(voice)
    _until(lambda: client.live_streams == 0)


def test_watch_slots_hears_each_finished_stream(client: EngineClient) -> None:
    """What server/admission.py waits on: told (in an engine thread) once a slot may be free."""
    heard: list[int] = []
    client.watch_slots(lambda: heard.append(client.live_streams))

    async def run():
        voice = await client.voice(speaker="ryan")
        # The streams of the tests before may still be heard of: in an engine process the engine's
        # count can fall before their `Finished` comes (seen in CI). Hear them out first.
        await _quiet(heard)
        before = len(heard)
        streams = [client.open_stream(voice, LONG) for _ in range(3)]
        with pytest.raises(EngineFull):
            client.open_stream(voice)
        await asyncio.sleep(0.1)
        told_while_full = len(heard) - before
        streams[0].cancel()
        await streams[0].wait()
        await asyncio.wait_for(_until_async(lambda: len(heard) > before + told_while_full), 5)
        # A hint: the engine here says so as the scheduler frees the slot, a moment early at times.
        await asyncio.wait_for(_until_async(lambda: client.live_streams < 3), 1)
        again = client.open_stream(voice, LONG)  # the slot it was told of
        for s in [again, *streams[1:]]:
            s.cancel()
        return told_while_full

    assert asyncio.run(run()) == 0
    _until(lambda: client.live_streams == 0)


async def _quiet(heard: list, seconds: float = 0.3) -> None:
    """Until `seconds` pass with nothing more in `heard`."""
    seen = -1
    while seen != len(heard):
        seen = len(heard)
        await asyncio.sleep(seconds)


async def _until_async(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_text_that_cannot_be_spoken_is_refused_and_the_stream_goes_on(client: EngineClient) -> None:
    async def run():
        stream = client.open_stream(await client.voice(speaker="ryan"), GREEDY)
        with pytest.raises(InvalidText, match="UTF-8 cannot encode"):
            stream.push_text("Hello \udc80 there")
        with pytest.raises(InvalidText, match="must be a string"):
            stream.push_text(b"bytes")  # type: ignore[arg-type]
        return await speak(stream, [TEXT])  # still open: text and end are taken

    heard = asyncio.run(run())
    assert heard.codes.shape == (30, 16)


def test_a_slow_reader_pauses_its_stream(tiny_checkpoints, tiny_models) -> None:
    config = EngineConfig(
        model=str(tiny_checkpoints["custom_voice"]), max_streams=2, kv_length=256, max_buffered_seconds=0.4
    )  # 5 frames

    async def run(engine: EngineClient):
        stream = engine.open_stream(
            await engine.voice(speaker="ryan"), StreamOptions(max_frames=200, suppress_eos=True, seed=3)
        )
        await feed(stream, [TEXT])
        await asyncio.sleep(1.0)
        waiting = stream.unread_samples
        heard = await asyncio.wait_for(collect(stream), 120)  # reading lets it go on to the end
        return waiting, heard

    for kind in KINDS:
        engine = _start(kind, config, tiny_models, "custom_voice")
        try:
            waiting, heard = asyncio.run(run(engine))
        finally:
            engine.close()
        # 5 frames of unread audio stop it, plus at most the decoder's next chunk (8 frames) in flight.
        assert 0 < waiting <= (5 + 8) * 1920, kind
        assert heard.codes.shape == (200, 16), kind


@pytest.mark.parametrize("kind", KINDS)
def test_the_event_loop_runs_on_while_a_reference_is_encoded(
    kind: str, tiny_checkpoints, tiny_models
) -> None:
    """A Base voice's x-vector and reference codes are made off the event loop: a 10 ms ticker
    (a ping answered meanwhile) is never late by 50 ms while they are computed."""
    config = EngineConfig(model=str(tiny_checkpoints["base"]), max_streams=2, kv_length=256)
    engine = _start(kind, config, tiny_models, "base")
    rng = np.random.default_rng(5)
    t = np.arange(24000 * 20) / 24000  # 20 s of reference audio
    wave = (0.3 * np.sin(2 * np.pi * 170 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)

    async def run():
        lags: list[float] = []
        computing = asyncio.create_task(engine.voice(ref_audio=(wave, 24000), ref_text="A reference."))
        started = time.perf_counter()
        while not computing.done():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)
        took = time.perf_counter() - started
        kept_at = time.perf_counter()
        again = await engine.voice(ref_audio=(wave, 24000), ref_text="A reference.")
        return computing.result(), again, took, time.perf_counter() - kept_at, lags

    try:
        voice, again, took, kept_took, lags = asyncio.run(run())
    finally:
        engine.close()
    assert voice.xvector is not None and voice.ref_codes is not None and voice.ref_codes.shape[1] == 16
    assert again is voice and kept_took < took / 10  # kept: no second computation
    assert took > 0.1 and len(lags) >= 5, (took, len(lags))  # the ticker really ran meanwhile
    assert max(lags) < 0.05, f"the event loop stalled for {max(lags) * 1000:.0f} ms"
