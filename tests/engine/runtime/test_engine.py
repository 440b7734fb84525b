"""The streaming engine end to end on the tiny checkpoints: text pieces, batching, waiting, cancel."""

import asyncio
import json
import logging
import math
import random
import time

import numpy as np
import pytest
import torch

from tests.engine.streaming import Heard, collect, feed, speak
from voicewire.engine.config import (
    ChunkSchedule,
    EngineConfig,
    FirstChunkAlone,
    PrefillWait,
    SpeechGuard,
    StreamOptions,
    UrgentChunks,
)
from voicewire.engine.errors import EngineFull, InvalidOptions, InvalidVoice, StreamClosed, StreamFailed
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.decoder_batch import GRAPH_FRAMES, split_frames
from voicewire.engine.runtime.engine import Engine

TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun."
FRAMES = 40
GREEDY = StreamOptions(greedy=True, max_frames=FRAMES, suppress_eos=True)


@pytest.fixture(scope="module")
def model(tiny_models) -> Qwen3TTS:
    return tiny_models["custom_voice"]


@pytest.fixture
def engine(model: Qwen3TTS):
    with Engine(model, EngineConfig(max_streams=8, kv_length=256)) as engine:
        yield engine


def _splits(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(12, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def test_text_pieces_do_not_change_the_output(engine: Engine, oracle, tiny_checkpoints, tmp_path) -> None:
    voice = asyncio.run(engine.voice(speaker="serena", language="english"))

    async def run(pieces: list[str], pause: float = 0.0):
        return await speak(engine.open_stream(voice, GREEDY), pieces, pause)

    whole = asyncio.run(run([TEXT]))
    assert whole.codes.shape == (FRAMES, 16) and whole.audio.shape == (FRAMES * 1920,)
    variants = {
        "characters": asyncio.run(run(list(TEXT))),
        "random split 1": asyncio.run(run(_splits(TEXT, 1))),
        "random split 2": asyncio.run(run(_splits(TEXT, 2))),
        "words with pauses": asyncio.run(run(_words(TEXT), pause=0.03)),
    }
    for name, heard in variants.items():
        np.testing.assert_array_equal(heard.codes, whole.codes, err_msg=name)
        np.testing.assert_array_equal(heard.text_ids, whole.text_ids, err_msg=name)
        assert np.abs(heard.audio - whole.audio).max() < 1e-5, name

    # The same codes as the official dual-track generate for the whole text.
    job = {
        "name": "dual",
        "model": str(tiny_checkpoints["custom_voice"]),
        "kind": "custom_voice",
        "text": TEXT,
        "speaker": "serena",
        "language": "english",
        "non_streaming_mode": False,
        "max_new_tokens": FRAMES + 1,
        "suppress_eos": True,
    }
    (tmp_path / "jobs.json").write_text(json.dumps([job]))
    oracle("synthesize.py", str(tmp_path / "jobs.json"), str(tmp_path))
    official = np.load(tmp_path / "dual.npz")
    np.testing.assert_array_equal(whole.codes, official["codes"])
    assert np.abs(whole.audio - official["wav"]).max() < 1e-4


def test_the_first_chunk_is_small_and_chunks_follow_the_schedule(model: Qwen3TTS) -> None:
    config = EngineConfig(max_streams=2, kv_length=256, chunks=ChunkSchedule(first_frames=1, frames=(2, 4)))

    async def run():
        with Engine(model, config) as engine:
            stream = engine.open_stream(await engine.voice(speaker="ryan"), GREEDY)
            return await speak(stream, [TEXT])

    heard = asyncio.run(run())
    sizes = [c.frames for c in heard.chunks]
    assert sizes[0] == 1 and sum(sizes) == FRAMES
    assert all(
        size in (2, 4, 8, 12, 16, 20, 24, 28, 32) or c.final
        for size, c in zip(sizes[1:], heard.chunks[1:], strict=True)
    )
    offsets = np.cumsum([0, *[c.pcm.shape[0] for c in heard.chunks]])[:-1]
    assert [c.offset for c in heard.chunks] == offsets.tolist()
    with torch.inference_mode():
        full = model.decoder(torch.as_tensor(heard.codes)[None])[0].numpy()
    assert np.abs(heard.audio - full).max() < 1e-5  # only new samples, equal to one full decode
    assert heard.chunks[-1].final and heard.chunks[-1].text_end == len(TEXT)
    assert "".join(c.text for c in heard.chunks) == TEXT


def test_metrics_count_what_the_engine_did(model: Qwen3TTS) -> None:
    config = EngineConfig(max_streams=2, kv_length=256, chunks=ChunkSchedule(first_frames=1, frames=(2, 4)))

    async def run():
        with Engine(model, config) as engine:
            stream = engine.open_stream(await engine.voice(speaker="ryan"), GREEDY)
            return engine, await speak(stream, [TEXT])

    engine, heard = asyncio.run(run())

    def value(name: str, labels: dict[str, str] | None = None) -> float:
        found = engine.metrics.registry.get_sample_value(name, labels)
        assert found is not None, name
        return found

    steps = engine.scheduler.steps
    assert value("voicewire_engine_frames_total") == FRAMES
    assert (
        value("voicewire_engine_step_seconds_count") == steps == value("voicewire_engine_step_streams_count")
    )
    assert value("voicewire_engine_step_streams_sum") == FRAMES  # one stream in each step
    # All text at once: the stream steps in every round after its prefill. Steps are pipelined (step
    # k + 1 launches before step k is read), so every launch from the third on follows a read.
    assert value("voicewire_engine_step_gap_seconds_count") == steps - 2
    assert (
        0 < value("voicewire_engine_step_gap_seconds_sum") < value("voicewire_engine_step_seconds_sum") * 10
    )
    # One stream: each decoder pass decodes one piece of one chunk (3 frames are a pass of 1, then 2),
    # counted under its frame count.
    pieces = [n for c in heard.chunks if c.frames for n in split_frames(c.frames)]
    for n in GRAPH_FRAMES:
        frames = {"frames": str(n)}
        assert value("voicewire_engine_decode_seconds_count", frames) == pieces.count(n)
        assert value("voicewire_engine_decode_streams_sum", frames) == pieces.count(n)
    assert {1, 2, 4} <= set(pieces)  # the schedule's sizes, 1 then 2s and 4s
    assert value("voicewire_engine_prefill_streams_sum") == value(
        "voicewire_engine_prefill_launch_seconds_count"
    )
    assert value("voicewire_engine_prefill_streams_sum") >= 1
    # One stream: one first frame and one first chunk, the chunk after the frame.
    assert value("voicewire_engine_first_frame_seconds_count") == 1
    assert value("voicewire_engine_first_chunk_seconds_count") == 1
    first_frame = value("voicewire_engine_first_frame_seconds_sum")
    assert 0 < first_frame <= value("voicewire_engine_first_chunk_seconds_sum")


def test_batching_does_not_change_the_output(engine: Engine) -> None:
    speakers = ["vivian", "serena", "ryan", "aiden", "eric", "dylan", "vivian", "serena"]
    languages = ["english", "english", "german", "auto", "chinese", "chinese", "french", "auto"]
    texts = [
        TEXT,
        "Good morning, everyone! How are you today?",
        "Speech synthesis turns text into sound.",
        "I am fine, thank you.",
        "你好，世界。今天天气很好。",
        "我们一起去公园散步吧。",
        "Hello there, this is a test of the voice.",
        "One frame at a time.",
    ]
    options = [
        StreamOptions(greedy=True, max_frames=24 + 2 * i, suppress_eos=True)
        if i % 2 == 0
        else StreamOptions(seed=100 + i, max_frames=24 + 2 * i, suppress_eos=True)
        for i in range(8)
    ]
    voices = [
        asyncio.run(engine.voice(speaker=s, language=lang))
        for s, lang in zip(speakers, languages, strict=True)
    ]

    async def together():
        streams = [engine.open_stream(v, o) for v, o in zip(voices, options, strict=True)]
        return await asyncio.gather(
            *(speak(s, _splits(t, i)) for i, (s, t) in enumerate(zip(streams, texts, strict=True)))
        )

    async def alone(i: int):
        return await speak(engine.open_stream(voices[i], options[i]), [texts[i]])

    steps = engine.scheduler.steps
    batched = asyncio.run(together())
    together_steps = engine.scheduler.steps - steps
    assert together_steps < 2 * max(o.max_frames for o in options)  # they really shared steps
    for i, heard in enumerate(batched):
        solo = asyncio.run(alone(i))
        assert heard.codes.shape == (24 + 2 * i, 16)
        np.testing.assert_array_equal(heard.codes, solo.codes, err_msg=f"stream {i}")
        assert np.abs(heard.audio - solo.audio).max() < 1e-5, f"stream {i}"


def test_a_stream_waits_for_text_without_feeding_pad(engine: Engine, model: Qwen3TTS) -> None:
    voice = asyncio.run(engine.voice(speaker="aiden", language="english"))
    half = len(TEXT) // 2
    pad, eos = model.text_ids.tts_pad, model.text_ids.tts_eos

    async def waited():
        stream = engine.open_stream(voice, GREEDY)
        listener = asyncio.create_task(collect(stream))
        stream.push_text(TEXT[:half])
        # On a slow machine the first half can take longer than any fixed sleep: wait until the
        # scheduler itself says the stream is starved, then prove it stays still.
        for _ in range(600):
            live = engine.scheduler.streams.live
            if live and all(entry.starved for entry in live):
                break
            await asyncio.sleep(0.05)
        frames_early = engine.scheduler.steps
        await asyncio.sleep(0.5)
        assert engine.scheduler.steps == frames_early  # nothing stepped while waiting
        stream.push_text(TEXT[half:])
        stream.end()
        return await listener

    heard = asyncio.run(waited())
    at_once = asyncio.run(_speak_once(engine, voice, GREEDY, TEXT))
    np.testing.assert_array_equal(heard.codes, at_once.codes)
    ids = heard.text_ids.tolist()
    assert pad not in ids[: ids.index(eos)]  # text, text, ..., tts_eos, then tts_pad only
    assert set(ids[ids.index(eos) + 1 :]) <= {pad}


def test_cancel_frees_everything_within_one_step(engine: Engine) -> None:
    voice = asyncio.run(engine.voice(speaker="vivian"))
    long = StreamOptions(max_frames=10_000, suppress_eos=True, seed=1)

    async def run():
        streams = [engine.open_stream(voice, long) for _ in range(4)]
        for s in streams:
            await feed(s, [TEXT * 3], end=False)
        received = {s.id: 0 for s in streams}
        for s in streams:
            async for chunk in s:
                received[s.id] += chunk.frames
                if received[s.id] >= 3:
                    break
        step_at_cancel = engine.scheduler.steps
        for s in streams:
            s.cancel()
        after = [chunk for s in streams async for chunk in s]
        results = [await s.wait() for s in streams]
        return step_at_cancel, after, results, streams

    step_at_cancel, after, results, streams = asyncio.run(run())
    assert after == []  # no chunk after cancel
    for result in results:
        assert result.reason == "cancelled" and result.end_step - step_at_cancel <= 1
        assert result.samples_generated >= result.samples_delivered >= 3 * 1920
    assert engine.live_streams == 0 and engine.used_slots == 0
    time.sleep(0.2)  # the decoder thread applies the drops it was sent
    assert engine.decoder_stage.open_streams == 0
    with pytest.raises(StreamClosed, match="cancelled"):
        streams[0].push_text("more")


def test_flush_speaks_what_is_there_and_reports_it(model: Qwen3TTS) -> None:
    # The random model never says EOS: a small KV bound ends each talker sequence (at 128 - prefix).
    config = EngineConfig(max_streams=2, kv_length=128)

    async def run():
        with Engine(model, config) as engine:
            stream = engine.open_stream(
                await engine.voice(speaker="eric", language="english"), StreamOptions(greedy=True)
            )
            listener = asyncio.create_task(collect(stream))
            stream.push_text("Hello there, frie")
            stream.flush()
            await asyncio.sleep(0.3)
            stream.push_text("nd. And more.")
            stream.end()
            return await listener

    heard = asyncio.run(run())
    flushed = [i for i, c in enumerate(heard.chunks) if c.flushed]
    assert len(flushed) == 1
    before = "".join(c.text for c in heard.chunks[: flushed[0] + 1])
    assert before == "Hello there, frie"  # the partial word was spoken at the flush
    assert "".join(c.text for c in heard.chunks) == "Hello there, friend. And more."
    ids = heard.text_ids.tolist()
    assert ids.count(model.text_ids.tts_eos) == 2  # two talker sequences: one per flush/end


def test_one_failing_stream_does_not_touch_the_others(tiny_models) -> None:
    model = tiny_models["voice_design"]
    options = StreamOptions(greedy=True, max_frames=20, suppress_eos=True)

    async def run():
        with Engine(model, EngineConfig(max_streams=4, kv_length=96)) as engine:
            good = await engine.voice(instruct="A calm voice.")
            bad = await engine.voice(
                instruct="A very long description of a voice. " * 12
            )  # longer than the KV
            alone = await speak(engine.open_stream(good, options), [TEXT])
            s_good, s_bad = engine.open_stream(good, options), engine.open_stream(bad, options)
            results = await asyncio.gather(
                speak(s_good, [TEXT]), speak(s_bad, [TEXT]), return_exceptions=True
            )
            return alone, results, engine.live_streams, await s_bad.wait()

    alone, (together, failure), live, result = asyncio.run(run())
    assert isinstance(failure, StreamFailed) and "the KV cache holds 96" in str(failure)
    assert result.reason == "error" and result.frames == 0
    np.testing.assert_array_equal(together.codes, alone.codes)
    assert live == 0


def test_a_broken_decoder_fails_its_streams_and_the_engine_refuses_more(model: Qwen3TTS) -> None:
    """A bug in the decoder's thread (here its row reset): the open stream fails with the cause,
    the engine says it is not healthy, and a new stream is refused at once rather than left silent."""

    def broken(rows) -> None:
        raise KeyError("row state")

    async def run() -> tuple[BaseException | None, bool]:
        with Engine(model, EngineConfig(max_streams=2, kv_length=128)) as engine:
            engine.decoder_stage.batch.reset = broken
            voice = await engine.voice(speaker="vivian")
            stream = engine.open_stream(voice, GREEDY)
            failure = None
            try:
                await asyncio.wait_for(speak(stream, [TEXT]), 30)
            except StreamFailed as exc:
                failure = exc
            with pytest.raises(RuntimeError, match="scheduler or decoder stopped"):
                engine.open_stream(voice, GREEDY)
            return failure, engine.healthy

    failure, healthy = asyncio.run(run())
    assert failure is not None and "decoding failed: KeyError: 'row state'" in str(failure)
    assert not healthy


def test_a_slow_reader_pauses_its_stream(model: Qwen3TTS) -> None:
    config = EngineConfig(max_streams=2, kv_length=256, max_buffered_seconds=0.4)  # 5 frames

    async def run():
        with Engine(model, config) as engine:
            stream = engine.open_stream(
                await engine.voice(speaker="ryan"), StreamOptions(max_frames=200, suppress_eos=True, seed=3)
            )
            await feed(stream, [TEXT])
            await asyncio.sleep(0.6)
            stepped = engine.scheduler.steps
            heard = await collect(stream)  # reading lets it go on to the end
            return stepped, heard

    stepped, heard = asyncio.run(run())
    # 5 frames of unread audio stop it, plus at most the decoder's next chunk (8 frames) in flight.
    assert stepped <= 5 + 8 and heard.codes.shape == (200, 16)


def test_bad_requests_are_clear_errors(engine: Engine, model: Qwen3TTS) -> None:
    with pytest.raises(InvalidVoice, match="unknown speaker 'nobody'"):
        asyncio.run(engine.voice(speaker="nobody"))
    with pytest.raises(InvalidOptions, match="unknown layout"):
        StreamOptions(layout="sideways")
    with pytest.raises(InvalidOptions, match="greedy decoding takes no seed"):
        StreamOptions(greedy=True, seed=1)
    with pytest.raises(RuntimeError, match="inside a running asyncio event loop"):
        engine.open_stream(asyncio.run(engine.voice(speaker="ryan")))

    async def full():
        with Engine(model, EngineConfig(max_streams=1, kv_length=128)) as small:
            voice = await small.voice(speaker="ryan")
            first = small.open_stream(voice)
            with pytest.raises(EngineFull, match="all 1 stream slots"):
                small.open_stream(voice)
            first.cancel()
            await first.wait()
            second = small.open_stream(voice, GREEDY)  # the slot is free again
            second.end()
            return await second.wait()

    assert asyncio.run(full()).reason == "end"


async def _speak_once(engine: Engine, voice, options: StreamOptions, text: str):
    return await speak(engine.open_stream(voice, options), [text])


def test_the_documented_example_runs(caplog: pytest.LogCaptureFixture) -> None:
    from voicewire.engine import Engine as PublicEngine
    from voicewire.engine import StreamOptions as PublicOptions

    caplog.set_level(logging.INFO, logger="voicewire.engine.runtime.engine")

    async def main():
        with PublicEngine.from_config("configs/cpu.yaml", max_streams=2) as engine:
            voice = await engine.voice(speaker="vivian", language="english")
            stream = engine.open_stream(voice, PublicOptions(seed=7, max_frames=6))
            stream.push_text("Hello there, ")
            stream.push_text("how are you today?")
            stream.end()
            chunks = [chunk async for chunk in stream]
            return chunks, await stream.wait()

    chunks, result = asyncio.run(main())
    assert result.reason in ("end", "max_frames") and result.samples_delivered == sum(
        c.pcm.shape[0] for c in chunks
    )
    assert chunks[-1].final and chunks[0].offset == 0
    # start-up is timed in the log, phase by phase (the CUDA graph captures log theirs too)
    assert any(
        r.getMessage().startswith("loaded ") and " on cpu in " in r.getMessage() for r in caplog.records
    )


def test_tune_changes_only_the_live_settings(tiny_models) -> None:
    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=2, kv_length=128)) as engine:
        engine.tune(prefill_wait=PrefillWait(max_s=0.01), urgent_chunks=UrgentChunks(in_hand_s=0.5))
        assert engine.scheduler.config.prefill_wait == PrefillWait(max_s=0.01)
        assert engine.decoder_stage.urgent == UrgentChunks(in_hand_s=0.5)
        engine.tune(chunks=ChunkSchedule(1, (3, 2)), first_chunk_alone=FirstChunkAlone(rows=4))
        assert engine.decoder_stage.chunks == ChunkSchedule(1, (3, 2))
        assert engine.scheduler.config.first_chunk_alone == FirstChunkAlone(rows=4)
        assert engine.decoder_stage.urgent == UrgentChunks(in_hand_s=0.5)  # the others kept
        with pytest.raises(InvalidOptions, match="kv_length cannot change on a running engine"):
            engine.tune(kv_length=256)
        assert engine.config.kv_length == 128


@pytest.mark.parametrize("first_frames", [1, 2])
def test_with_first_chunk_alone_the_next_step_waits_for_the_first_chunks_pass(
    model: Qwen3TTS, first_frames: int
) -> None:
    """The step that completes a new stream's first chunk is read before the next is launched, and
    that launch waits for the decoder to queue the chunk's pass (on CUDA its stream then waits for
    the pass on the GPU too). Off, steps are pipelined: the next is launched before the host reads
    the one before. The codes are the same, and so is the audio up to float rounding."""
    chunks = ChunkSchedule(first_frames=first_frames, frames=(2, 4))

    def run(alone: FirstChunkAlone) -> tuple[list[str], Heard]:
        calls: list[str] = []
        config = EngineConfig(max_streams=2, kv_length=256, chunks=chunks, first_chunk_alone=alone)
        with Engine(model, config) as engine:
            stepper, batch = engine.scheduler.stepper, engine.decoder_stage.batch
            step, decode = stepper.step, batch.decode

            def logged_step(*args, **kwargs):
                calls.append("step")
                return step(*args, **kwargs)

            def logged_decode(rows, codes, launched=None):
                calls.append(f"decode {codes.shape[1]}")
                return decode(rows, codes, launched)

            stepper.step, batch.decode = logged_step, logged_decode  # type: ignore[method-assign]

            async def speak_once():
                return await speak(engine.open_stream(await engine.voice(speaker="ryan"), GREEDY), [TEXT])

            heard = asyncio.run(speak_once())
        return calls, heard

    first = f"decode {first_frames}"
    off, heard_off = run(FirstChunkAlone())
    on, heard_on = run(FirstChunkAlone(rows=8, wait_s=10.0))  # a bound no CI machine meets
    steps_before = first_frames + 1  # the step after the one that completes the first chunk is in
    assert off.index(first) >= steps_before  # (the decoder's thread may come later still)
    assert on[: steps_before + 1] == ["step"] * (steps_before - 1) + [first, "step"]
    np.testing.assert_array_equal(heard_on.codes, heard_off.codes)
    # Not bit for bit: where the decoder's thread falls behind on a busy host, it takes several
    # chunks' frames of a stream in one pass (decode_stage._Decoding.due, up to MAX_DECODE_FRAMES),
    # and a pass cut elsewhere rounds differently (1.1e-6 apart at most, seen on a 2-CPU CI run).
    np.testing.assert_allclose(heard_on.audio, heard_off.audio, rtol=0, atol=1e-5)


def test_the_speech_guard_ends_a_sequence_that_never_says_end_of_speech(model: Qwen3TTS) -> None:
    """The random checkpoint never says EOS: without the guard "Hello there." would run to the KV
    bound. Once its text is in, a sequence gets after_text_s plus per_token_s a token; the stream
    ends with reason "length". With the whole text in the prompt (non_streaming), that is all."""
    text = "Hello there."
    tokens = len(model.tokenizer.encode(text))
    config = EngineConfig(
        max_streams=2, kv_length=512, speech_guard=SpeechGuard(after_text_s=1.0, per_token_s=0.25)
    )

    async def run(options: StreamOptions):
        with Engine(model, config) as engine:
            stream = engine.open_stream(await engine.voice(speaker="ryan"), options)
            heard = await speak(stream, [text])
            return heard, await stream.wait()

    heard, result = asyncio.run(run(StreamOptions(seed=3, layout="non_streaming")))
    expected = math.ceil((1.0 + 0.25 * tokens) * 12.5)
    assert result.reason == "length" and result.frames == expected == heard.codes.shape[0]
    assert heard.audio.shape == (expected * 1920,)
    # Streamed text: the frames that feed the text come first, then the same allowance.
    heard, result = asyncio.run(run(StreamOptions(seed=3)))
    assert result.reason == "length" and expected < result.frames <= expected + tokens + 1
    # A benchmark's forced length is not guarded.
    heard, result = asyncio.run(run(StreamOptions(seed=3, max_frames=200, suppress_eos=True)))
    assert result.reason == "max_frames" and result.frames == 200
