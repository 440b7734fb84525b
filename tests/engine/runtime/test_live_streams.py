"""The table both talker backends keep their streams in (engine/runtime/live_streams.py), driven by hand
with real streams on the tiny checkpoint and a sink that records what it is told."""

import itertools
import logging
from dataclasses import dataclass

import pytest

from tests.engine.backend_contract import Recorder
from voicewire.engine.config import GenerationOptions, StreamOptions
from voicewire.engine.errors import EngineFull, StreamFailed
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.live_streams import LiveStream, LiveStreams
from voicewire.engine.runtime.segments import SegmentPolicy
from voicewire.engine.runtime.stream import Stream
from voicewire.engine.voice import Voice

_ids = itertools.count(1)


@dataclass(eq=False)
class _Counted(LiveStream):
    """A backend's own record: its fields ride along from submit to release."""

    rounds: int = 0


@pytest.fixture(scope="module")
def model(tiny_models) -> Qwen3TTS:
    return tiny_models["custom_voice"]


def _table(model: Qwen3TTS, max_streams: int = 2) -> tuple[LiveStreams[_Counted], Recorder, list[int]]:
    sink, step = Recorder(), [0]
    table = LiveStreams(_Counted, model.parts(), sink, max_streams, SegmentPolicy(), lambda: step[0])
    return table, sink, step


def _submit(model: Qwen3TTS, table: LiveStreams, voice: Voice | None = None, **options) -> Stream:
    stream = Stream(
        next(_ids),
        voice or model.voice(speaker="vivian", language="english"),
        StreamOptions(**options),
        model.tokenizer,
        lambda: None,
    )
    table.submit(stream, GenerationOptions.from_generation_config(model.generation_config), 3)
    return stream


def test_submit_gives_the_lowest_free_slot_and_refuses_past_capacity(model: Qwen3TTS) -> None:
    table, sink, _ = _table(model)
    first, second = _submit(model, table, seed=7), _submit(model, table)
    assert (table.count, table.used_slots) == (2, 2) and not table.live  # queued, not admitted
    with pytest.raises(EngineFull, match="all 2 stream slots are in use"):
        _submit(model, table)
    incoming = table.take_incoming()
    assert [(type(live), live.stream, live.slot) for live in incoming] == [
        (_Counted, first, 0),
        (_Counted, second, 1),
    ]
    assert incoming[0].seed == 7 and incoming[0].lookahead == 3 and table.take_incoming() == []
    assert 0 <= incoming[1].seed < 2**63  # no seed asked: a random one, fixed from here on
    for live in incoming:
        assert table.admit(live)
    assert table.release(incoming[0], "cancelled")
    third = _submit(model, table)
    assert table.take_incoming()[0].slot == 0  # the freed slot, below the next unused one
    assert (table.count, table.used_slots) == (2, 2) and third.id not in sink.heard


def test_admission_builds_the_voice_and_opens_the_stream(model: Qwen3TTS) -> None:
    table, sink, _ = _table(model)
    stream = _submit(model, table)
    (live,) = table.take_incoming()
    assert table.admit(live)
    assert table.live == [live] and live.voice is not None
    assert live.segments.ref_ids == live.voice.ref_ids and sink.of(stream).opened


def test_a_voice_that_does_not_build_fails_its_stream_alone(
    model: Qwen3TTS, caplog: pytest.LogCaptureFixture
) -> None:
    table, sink, step = _table(model)
    good = _submit(model, table)
    bad = _submit(model, table, Voice(speaker="nobody", language="english"))
    step[0] = 5
    good_live, bad_live = table.take_incoming()
    with caplog.at_level(logging.WARNING, "voicewire.engine.runtime.live_streams"):
        assert table.admit(good_live) and not table.admit(bad_live)
    reason, frames, error = sink.of(bad).end or ("", -1, None)
    assert (reason, frames) == ("error", 0) and isinstance(error, StreamFailed)
    assert str(error).startswith("ValueError: unknown speaker 'nobody'")
    assert f"stream {bad.id} failed" in caplog.text
    assert not sink.of(bad).opened and bad_live.released and table.live == [good_live]
    assert (table.count, table.used_slots) == (1, 1) and sink.of(good).end is None


def test_draining_moves_text_and_marks_into_segments(model: Qwen3TTS) -> None:
    table, _, _ = _table(model)
    stream = _submit(model, table)
    (live,) = table.take_incoming()
    table.admit(live)
    before = live.last_text
    assert table.drain(live) is False and live.last_text == before  # nothing came: not news
    stream.push_text("Hello there.")
    stream.flush()
    stream.push_text(" More words")
    stream.end()
    assert table.drain(live) is False
    first, second = live.segments.segments
    assert first.complete and first.flushed and second.complete and not second.flushed
    assert [t.id for t in first.tokens if t is not None] == model.tokenizer.encode("Hello there.")
    assert "".join(t.text for t in second.tokens if t is not None) == " More words"
    assert live.ended and live.last_text > before


@pytest.mark.parametrize("how", ["cancel", "abort"])
def test_a_cancelled_stream_drains_nothing_and_says_so(model: Qwen3TTS, how: str) -> None:
    table, _, _ = _table(model)
    stream = _submit(model, table)
    (live,) = table.take_incoming()
    table.admit(live)
    stream.push_text("Words that will not be spoken.")
    getattr(stream, how)()
    assert table.drain(live) is True
    assert not live.segments.segments and not live.released  # the backend releases it


def test_release_tells_the_decoder_how_the_stream_ended_once(model: Qwen3TTS) -> None:
    table, sink, step = _table(model, max_streams=3)
    streams = [_submit(model, table) for _ in range(3)]
    lives = table.take_incoming()
    for live in lives:
        table.admit(live)
    lives[0].frames = lives[1].frames = 4
    step[0] = 9
    failed = StreamFailed("broken")
    assert table.release(lives[0], "length") and table.release(lives[1], "error", failed)
    assert table.release(lives[2], "cancelled")
    assert [sink.of(s).end for s in streams] == [
        ("length", 4, None),
        ("error", 4, failed),
        ("cancelled", 0, None),
    ]
    assert [sink.of(s).end_step for s in streams] == [9, 9, 9]  # the backend's step at release
    assert not table.release(lives[0], "error", failed) and sink.of(streams[0]).end == ("length", 4, None)
    assert (table.count, table.used_slots, table.live) == (0, 0, [])


def test_a_stopped_backend_refuses_new_streams(model: Qwen3TTS) -> None:
    table, _, _ = _table(model)
    assert table.error is None
    bug = RuntimeError("a bug in the loop")
    table.stopped(bug)
    with pytest.raises(RuntimeError, match="the talker backend or the decoder stopped") as raised:
        _submit(model, table)
    assert raised.value.__cause__ is bug and table.error is bug and table.count == 0


def test_a_failure_keeps_engine_errors_and_wraps_the_rest(model: Qwen3TTS) -> None:
    table, _, _ = _table(model)
    _submit(model, table)
    (live,) = table.take_incoming()
    own = StreamFailed("the talker produced non-finite values for this stream")
    assert table.failure(live, own) is own
    wrapped = table.failure(live, ValueError("prompt needs 300 positions"))
    assert isinstance(wrapped, StreamFailed) and str(wrapped) == "ValueError: prompt needs 300 positions"
