"""The decoder stage's scheduling of decode calls (the decoding itself is in test_decoder_batch)."""

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from voicewire.engine.config import ChunkSchedule, StreamOptions, UrgentChunks
from voicewire.engine.runtime import decode_stage as decode_stage_module
from voicewire.engine.runtime.decode_stage import DecoderStage
from voicewire.engine.runtime.segments import TrackEntry
from voicewire.engine.runtime.stream import SAMPLES_PER_FRAME, Stream


def test_first_chunks_decode_before_running_streams_chunks(tiny_models) -> None:
    """A new stream's one-frame first chunk is not held behind a running stream's eight frames."""
    model = tiny_models["custom_voice"]
    stage = DecoderStage(model.decoder, slots=4, chunks=ChunkSchedule(1, (8,)))
    calls: list[tuple[int, int]] = []  # (stream row, frames) per decode call, in order
    decode = stage.batch.decode
    stage.batch.decode = lambda rows, codes, launched=None: (
        calls.append((rows[0], codes.shape[1])) or decode(rows, codes, launched)
    )
    voice = model.voice(speaker="vivian")
    running, new = (Stream(i, voice, StreamOptions(), model.tokenizer, lambda: None) for i in (1, 2))
    codes = np.arange(16, dtype=np.int64)[None] * 7
    fed = [TrackEntry(5, ())]
    stage.open(running, None)
    stage.frames([running], codes, fed)
    stage.process()  # the running stream's first chunk
    for _ in range(8):
        stage.frames([running], codes, fed)
    stage.open(new, None)
    stage.frames([new], codes, fed)
    stage.process()
    assert calls == [(0, 1), (1, 1), (0, 8)]
    assert running.delivered_samples == 9 * SAMPLES_PER_FRAME and new.delivered_samples == SAMPLES_PER_FRAME


def test_chunks_due_at_different_counts_share_decoder_passes(tiny_models) -> None:
    """Streams due with 13, 8 and 5 frames decode in three passes, one per graphed frame count
    (1, 4, 8), each stream riding in those its chunk needs; every stream's audio is its whole decode."""
    model = tiny_models["custom_voice"]
    stage = DecoderStage(model.decoder, slots=4, chunks=ChunkSchedule(1, (8,)))
    calls: list[tuple[list[int], int]] = []  # (stream rows, frames) per decoder pass, in order
    decode = stage.batch.decode
    stage.batch.decode = lambda rows, codes, launched=None: (
        calls.append((list(rows), codes.shape[1])) or decode(rows, codes, launched)
    )
    voice = model.voice(speaker="vivian")
    streams = [Stream(i, voice, StreamOptions(), model.tokenizer, lambda: None) for i in (1, 2, 3)]
    gen = np.random.default_rng(4)
    codes = {s.id: gen.integers(0, 2048, (14, 16)) for s in streams}
    fed = [TrackEntry(5, ())]
    heard: dict[int, list[np.ndarray]] = {s.id: [] for s in streams}
    for s in streams:
        s.deliver = lambda chunk, s=s: heard[s.id].append(chunk.pcm)
        stage.open(s, None)
    a, b, c = streams
    stage.frames([b], codes[b.id][:1], fed)
    stage.process()  # b's first chunk: b is now due every 8 frames
    for i in range(13):
        stage.frames([a], codes[a.id][i : i + 1], fed)
    for i in range(1, 9):
        stage.frames([b], codes[b.id][i : i + 1], fed)
    for i in range(5):
        stage.frames([c], codes[c.id][i : i + 1], fed)
    stage.process()
    assert calls == [([1], 1), ([0, 2], 1), ([0, 2], 4), ([0, 1], 8)]
    # One chunk each: 13, 1 + 8 and 5 frames.
    assert [len(heard[s.id]) for s in streams] == [1, 2, 1]
    for s, frames in zip(streams, (13, 9, 5), strict=True):
        with torch.inference_mode():
            whole = model.decoder(torch.from_numpy(codes[s.id][None, :frames])).float()[0].numpy()
        got = np.concatenate(heard[s.id])
        assert got.shape == (frames * SAMPLES_PER_FRAME,)
        np.testing.assert_allclose(got, whole, atol=1e-5)


def test_a_late_chunk_counts_the_gap_its_player_would_hear(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """player_gap: 0.24 s out at once starts a 200 ms-buffer player, which plays to 0.24 s; the next
    chunk comes out at 1.0 s, so it would have waited 0.76 s."""
    clock = [0.0]
    monkeypatch.setattr(decode_stage_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    model = tiny_models["custom_voice"]
    stage = DecoderStage(model.decoder, slots=2, chunks=ChunkSchedule(1, (2,)))
    stream = Stream(1, model.voice(speaker="vivian"), StreamOptions(), model.tokenizer, lambda: None)
    codes = np.arange(16, dtype=np.int64)[None] * 7
    stage.open(stream, None)
    for _ in range(3):  # a 1-frame chunk and a 2-frame chunk
        stage.frames([stream], codes, [TrackEntry(5, ())])
    stage.process()
    gaps = stage.metrics.registry.get_sample_value
    assert gaps("voicewire_engine_player_gap_seconds_count") == 0
    clock[0] = 1.0
    for _ in range(2):
        stage.frames([stream], codes, [TrackEntry(5, ())])
    stage.process()
    assert stream.delivered_samples == 5 * SAMPLES_PER_FRAME
    assert gaps("voicewire_engine_player_gap_seconds_count") == 1
    assert gaps("voicewire_engine_player_gap_seconds_sum") == pytest.approx(0.76)


def _round_of_two_listeners(model, urgent: UrgentChunks, monkeypatch: pytest.MonkeyPatch) -> list:
    """On a clock that stands still, a has 0.24 s in hand and b none; both have a one-frame chunk
    due. Returns the decoder passes of the round, as (streams, frames)."""
    monkeypatch.setattr(decode_stage_module, "time", SimpleNamespace(monotonic=lambda: 100.0))
    stage = DecoderStage(model.decoder, slots=4, chunks=ChunkSchedule(1, (2, 1)), urgent=urgent)
    voice = model.voice(speaker="vivian")
    a, b = (Stream(i, voice, StreamOptions(), model.tokenizer, lambda: None) for i in (1, 2))
    codes = np.arange(16, dtype=np.int64)[None] * 7
    fed = [TrackEntry(5, ())]
    stage.open(a, None)
    for n in (1, 2):  # a's chunks of 1 and 2 frames: 0.24 s, so its player has started
        for _ in range(n):
            stage.frames([a], codes, fed)
        stage.process()
    calls: list[tuple[list[str], int]] = []
    decode = stage.batch.decode
    names = {stage._streams[a.id].row: "a"}
    stage.batch.decode = lambda rows, codes, launched=None: (
        calls.append(([names.get(r, "b") for r in rows], codes.shape[1])) or decode(rows, codes, launched)
    )
    stage.open(b, None)
    stage.frames([a, b], np.concatenate([codes, codes]), fed * 2)
    stage.process()
    assert a.delivered_samples == 4 * SAMPLES_PER_FRAME and b.delivered_samples == SAMPLES_PER_FRAME
    return calls


def test_urgent_chunks_decode_before_the_chunks_of_listeners_with_audio_in_hand(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b has nothing in hand: its chunk goes in a pass of its own, a's after it."""
    calls = _round_of_two_listeners(tiny_models["custom_voice"], UrgentChunks(in_hand_s=0.2), monkeypatch)
    assert calls == [(["b"], 1), (["a"], 1)]


def test_with_shared_passes_urgent_chunks_and_the_others_ride_together(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b, with nothing in hand, is still taken first (its row leads the pass), but a's chunk of the
    same frame count rides in the same pass instead of one after it."""
    urgent = UrgentChunks(in_hand_s=0.2, shared_passes=True)
    calls = _round_of_two_listeners(tiny_models["custom_voice"], urgent, monkeypatch)
    assert calls == [(["b", "a"], 1)]


def test_without_urgent_chunks_every_due_chunk_shares_the_round_s_passes(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _round_of_two_listeners(tiny_models["custom_voice"], UrgentChunks(), monkeypatch)
    assert calls == [(["a", "b"], 1)]


def _listeners_in_hand(model, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """On a clock that stands still, with one bulk row a round (`in_hand_s` 0.2): a has 0.32 s in
    hand and b 0.24 s. Returns the stage, a, b, a maker of further streams (by id) and
    `feed(streams)`, which gives each stream one frame."""
    monkeypatch.setattr(decode_stage_module, "time", SimpleNamespace(monotonic=lambda: 100.0))
    stage = DecoderStage(
        model.decoder, slots=4, chunks=ChunkSchedule(1, (2, 1)), urgent=UrgentChunks(0.2, bulk_rows=1)
    )
    voice = model.voice(speaker="vivian")

    def stream(i: int) -> Stream:
        return Stream(i, voice, StreamOptions(), model.tokenizer, lambda: None)

    def feed(streams: list[Stream]) -> None:
        codes = np.arange(16, dtype=np.int64)[None] * 7
        stage.frames(streams, np.concatenate([codes] * len(streams)), [TrackEntry(5, ())] * len(streams))

    a, b = stream(1), stream(2)
    for s in (a, b):
        stage.open(s, None)
    for batches in ([[a, b]], [[a, b], [a, b]], [[a]]):  # a: chunks of 1, 2, 1 frames; b: 1, 2
        for streams in batches:
            feed(streams)
        stage.process()
    assert (a.delivered_samples, b.delivered_samples) == (4 * SAMPLES_PER_FRAME, 3 * SAMPLES_PER_FRAME)
    return stage, a, b, stream, feed


def test_bulk_rows_leave_the_chunks_with_most_in_hand_for_the_next_round(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one bulk row a round: c (nothing in hand) first, then b (0.24 s in hand) before a (0.32 s).
    d's first frame, which arrives during the first pass, goes in the next round, before a (with
    `join_waiting` off; test_a_new_stream_s_first_chunk_joins_the_round_in_flight has it on)."""
    stage, a, b, stream, feed = _listeners_in_hand(tiny_models["custom_voice"], monkeypatch)
    c, d = stream(3), stream(4)
    calls: list[list[str]] = []
    decode = stage.batch.decode
    names = {stage._streams[s.id].row: name for name, s in zip("ab", (a, b), strict=True)}

    def decoding(rows, frames, launched=None):
        if not calls:
            stage.open(d, None)
            feed([d])
        calls.append([names.get(r, "c" if len(calls) == 0 else "d") for r in rows])
        return decode(rows, frames, launched)

    stage.batch.decode = decoding
    stage.open(c, None)
    feed([a, b, c])

    def rounds() -> list[float | None]:  # rounds, their chunks, and the urgent ones among them
        value = stage.metrics.registry.get_sample_value
        return [
            value("voicewire_engine_decode_round_seconds_count"),
            value("voicewire_engine_decode_round_chunks_sum"),
            value("voicewire_engine_decode_round_urgent_sum"),
            value("voicewire_engine_decode_round_joined_sum"),
        ]

    before = rounds()
    stage.process()
    assert calls == [["c"], ["b"], ["d"], ["a"]]
    assert [s.delivered_samples // SAMPLES_PER_FRAME for s in (a, b, c, d)] == [5, 4, 1, 1]
    # Two rounds: c (urgent) with b, then d (urgent) with a; none joined.
    assert [after - was for after, was in zip(rounds(), before, strict=True)] == [2, 4, 2, 0]


@pytest.mark.parametrize("busy", [False, True])
def test_busy_bulk_rows_cap_a_round_only_while_more_streams_are_open(
    tiny_models, monkeypatch: pytest.MonkeyPatch, busy: bool
) -> None:
    """Two bulk rows a round, one while more than two streams are open. With a and b open, both
    ride one round (a first, as they came); with a third open (c, no frames yet), b (0.24 s in
    hand) goes in a round before a's (0.32 s)."""
    stage, a, b, stream, feed = _listeners_in_hand(tiny_models["custom_voice"], monkeypatch)
    stage.urgent = UrgentChunks(0.2, bulk_rows=2, busy_streams=2, busy_bulk_rows=1)
    names = {stage._streams[s.id].row: name for name, s in zip("ab", (a, b), strict=True)}
    calls: list[list[str]] = []
    decode = stage.batch.decode

    def decoding(rows, frames, launched=None):
        calls.append([names[r] for r in rows])
        return decode(rows, frames, launched)

    stage.batch.decode = decoding
    if busy:
        stage.open(stream(3), None)
    feed([a, b])
    stage.process()
    assert calls == ([["b"], ["a"]] if busy else [["a", "b"]])
    assert [s.delivered_samples // SAMPLES_PER_FRAME for s in (a, b)] == [5, 4]


def test_urgent_rows_take_the_listeners_with_least_in_hand_first(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every listener short of a second is urgent; with one urgent row a round, c (a new stream,
    nothing in hand) goes first, then b (0.24 s in hand), then a (0.32 s), a round each."""
    stage, a, b, stream, feed = _listeners_in_hand(tiny_models["custom_voice"], monkeypatch)
    stage.urgent = UrgentChunks(1.0, bulk_rows=1, urgent_rows=1)
    c = stream(3)
    names = {stage._streams[s.id].row: name for name, s in zip("ab", (a, b), strict=True)}
    calls: list[list[str]] = []
    decode = stage.batch.decode

    def decoding(rows, frames, launched=None):
        calls.append([names.get(r, "c") for r in rows])
        return decode(rows, frames, launched)

    stage.batch.decode = decoding
    stage.open(c, None)
    feed([a, b, c])
    rounds = stage.metrics.registry.get_sample_value("voicewire_engine_decode_round_seconds_count")
    stage.process()
    assert calls == [["c"], ["b"], ["a"]]
    assert [s.delivered_samples // SAMPLES_PER_FRAME for s in (a, b, c)] == [5, 4, 1]
    assert (
        stage.metrics.registry.get_sample_value("voicewire_engine_decode_round_seconds_count") - rounds == 3
    )


@pytest.mark.parametrize("ended", [False, True])
def test_among_listeners_with_audio_in_hand_an_ended_stream_goes_first(
    tiny_models, monkeypatch: pytest.MonkeyPatch, ended: bool
) -> None:
    """a has 0.32 s in hand, b 0.24 s; one bulk row a round. b, with less, goes first, unless a's
    talker has ended: its session ends with this chunk (and its client waits for that end)."""
    stage, a, b, _, feed = _listeners_in_hand(tiny_models["custom_voice"], monkeypatch)
    calls: list[list[str]] = []
    decode = stage.batch.decode
    names = {stage._streams[s.id].row: name for name, s in zip("ab", (a, b), strict=True)}
    stage.batch.decode = lambda rows, frames, launched=None: (
        calls.append([names[r] for r in rows]) or decode(rows, frames, launched)
    )
    feed([a, b])
    if ended:
        stage.close(a, "end", 5, 5)
    stage.process()
    assert calls == ([["a"], ["b"]] if ended else [["b"], ["a"]])
    final = stage.metrics.registry.get_sample_value("voicewire_engine_final_chunk_seconds_count")
    assert final == ended and (a.result is not None) == ended


def test_a_chunk_s_pieces_join_into_an_array_of_their_own() -> None:
    """Rows of a decoder pass's output (views of one host buffer) become one float32 array that owns
    its memory: writing it or reusing the buffer changes neither."""
    passes = [np.arange(2 * 6, dtype=np.float32).reshape(2, 6), -np.ones((3, 4), dtype=np.float32)]
    pieces = [passes[0][1], passes[1][2]]
    joined = decode_stage_module.join_samples(pieces)
    assert joined.dtype == np.float32 and joined.flags.writeable
    np.testing.assert_array_equal(joined, [6, 7, 8, 9, 10, 11, -1, -1, -1, -1])
    joined[0] = 100.0
    passes[1][2] = 5.0
    assert passes[0][1, 0] == 6.0 and joined[-1] == -1.0
    assert decode_stage_module.join_samples([np.zeros(0, np.float32)]).shape == (0,)


def _round_in_flight(
    model, monkeypatch: pytest.MonkeyPatch, during, urgent: UrgentChunks | None = None
) -> tuple:
    """On a clock that stands still (`in_hand_s` 0.2, `join_waiting` on, or `urgent`): `ahead` has 0.24 s in hand, `running` a
    13-frame chunk due (passes of 1, 4 and 8 frames). `during(stage, streams, feed)` runs as the
    round's first pass starts, as the scheduler's thread would. Returns the passes (names,
    frames), the chunks in delivery order (name, pcm), the streams and their codes."""
    monkeypatch.setattr(decode_stage_module, "time", SimpleNamespace(monotonic=lambda: 100.0))
    stage = DecoderStage(
        model.decoder,
        slots=4,
        chunks=ChunkSchedule(1, (1,)),
        urgent=urgent or UrgentChunks(in_hand_s=0.2, join_waiting=True),
    )
    voice = model.voice(speaker="vivian")
    names = ("running", "ahead", "new")
    streams = {
        name: Stream(i, voice, StreamOptions(), model.tokenizer, lambda: None) for i, name in enumerate(names)
    }
    gen = np.random.default_rng(11)
    codes = {name: gen.integers(0, 2048, (14, 16)) for name in streams}
    fed = {name: 0 for name in streams}
    heard: list[tuple[str, np.ndarray]] = []
    for name, s in streams.items():
        s.deliver = lambda chunk, name=name: heard.append((name, chunk.pcm))

    def feed(*names: str, frames: int = 1) -> None:
        for _ in range(frames):
            for name in names:
                stage.frames([streams[name]], codes[name][fed[name] : fed[name] + 1], [TrackEntry(5, ())])
                fed[name] += 1

    for name in ("running", "ahead"):
        stage.open(streams[name], None)
    feed("running")
    feed("ahead", frames=3)  # a first chunk of 3 frames: 0.24 s, so its player has started
    stage.process()
    heard.clear()
    calls: list[tuple[list[str], int]] = []
    decode = stage.batch.decode

    def decoding(rows, frames, launched=None):
        if not calls:
            during(stage, streams, feed)
        owners = {stage._streams[s.id].row: name for name, s in streams.items() if s.id in stage._streams}
        calls.append(([owners[r] for r in rows], frames.shape[1]))
        return decode(rows, frames, launched)

    stage.batch.decode = decoding
    feed("running", frames=13)
    stage.process()
    return stage, calls, heard, streams, codes


def _whole(model, codes: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return model.decoder(torch.from_numpy(codes[None])).float()[0].numpy()


def test_a_new_stream_s_first_chunk_joins_the_round_in_flight(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream opened while a round runs has its first frame decoded in the round's next pass,
    not after the round; `ahead`, fed too but with audio in hand, waits for the next round. Every
    chunk is still its stream's exact decode."""
    model = tiny_models["custom_voice"]

    def during(stage, streams, feed) -> None:
        stage.open(streams["new"], None)
        feed("new", "ahead")

    stage, calls, heard, _, codes = _round_in_flight(model, monkeypatch, during)
    assert calls == [(["running"], 1), (["new"], 1), (["running"], 4), (["running"], 8), (["ahead"], 1)]
    assert [name for name, _ in heard] == ["new", "running", "ahead"]
    value = stage.metrics.registry.get_sample_value
    assert value("voicewire_engine_decode_round_joined_sum") == 1
    assert (
        value("voicewire_engine_decode_round_chunks_sum") == 2 + 2 + 1
    )  # the set-up's round, this one, ahead's
    pcm = dict(heard)
    np.testing.assert_allclose(pcm["new"], _whole(model, codes["new"][:1]), atol=1e-5)
    # running's 13 frames follow its first; ahead's fourth frame its first three.
    np.testing.assert_allclose(
        pcm["running"], _whole(model, codes["running"][:14])[SAMPLES_PER_FRAME:], atol=1e-5
    )
    np.testing.assert_allclose(
        pcm["ahead"], _whole(model, codes["ahead"][:4])[3 * SAMPLES_PER_FRAME :], atol=1e-5
    )


def _ahead_ends(stage, streams, feed) -> None:
    """During the round: `ahead` gets its last frame and its talker's end."""
    feed("ahead")
    stage.close(streams["ahead"], "end", 4, 9)


def test_an_ended_stream_s_last_chunk_joins_the_round_in_flight_with_join_final(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `join_final`, `ahead`'s last frame, whose talker ended while the round ran, is decoded
    in the round's next pass though its listener has 0.24 s in hand, and its stream is finished
    before the round's own 4- and 8-frame passes; without it, that chunk waits for the next round."""
    model = tiny_models["custom_voice"]
    joins = UrgentChunks(in_hand_s=0.2, join_waiting=True, join_final=True)
    stage, calls, heard, streams, codes = _round_in_flight(model, monkeypatch, _ahead_ends, joins)
    assert calls == [(["running"], 1), (["ahead"], 1), (["running"], 4), (["running"], 8)]
    assert [name for name, _ in heard] == ["ahead", "running"]
    result = streams["ahead"].result
    assert result is not None and (result.reason, result.samples_delivered) == ("end", 4 * SAMPLES_PER_FRAME)
    assert stage.metrics.registry.get_sample_value("voicewire_engine_decode_round_joined_sum") == 1
    np.testing.assert_allclose(
        dict(heard)["ahead"], _whole(model, codes["ahead"][:4])[3 * SAMPLES_PER_FRAME :], atol=1e-5
    )

    stage, calls, heard, _, _ = _round_in_flight(model, monkeypatch, _ahead_ends)
    assert calls == [(["running"], 1), (["running"], 4), (["running"], 8), (["ahead"], 1)]
    assert [name for name, _ in heard] == ["running", "ahead"]


def test_an_ended_stream_whose_frames_were_decoded_ends_during_the_round_with_join_final(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ahead`'s frames all went in an earlier round; its talker's end, which comes while a round
    runs, goes out then with `join_final` (an empty final chunk, its stream finished) and adds no
    pass; without it, after the round."""
    model = tiny_models["custom_voice"]

    def ahead_ends(stage, streams, feed) -> None:
        stage.close(streams["ahead"], "end", 3, 9)

    joins = UrgentChunks(in_hand_s=0.2, join_waiting=True, join_final=True)
    for urgent, order in ((joins, ["ahead", "running"]), (None, ["running", "ahead"])):
        stage, calls, heard, streams, _ = _round_in_flight(model, monkeypatch, ahead_ends, urgent)
        assert calls == [(["running"], 1), (["running"], 4), (["running"], 8)]
        assert [name for name, _ in heard] == order
        assert dict(heard)["ahead"].shape == (0,)
        result = streams["ahead"].result
        assert result is not None and (result.reason, result.samples_delivered) == (
            "end",
            3 * SAMPLES_PER_FRAME,
        )
        assert streams["ahead"].id not in stage._streams


def test_ended_streams_last_chunks_wait_for_the_next_round_while_busy(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While more streams are open than `busy_streams` (two, over one), `join_final` lets no last
    chunk in: a burst's rounds stay short."""
    model = tiny_models["custom_voice"]
    busy = UrgentChunks(in_hand_s=0.2, join_waiting=True, join_final=True, busy_streams=1, busy_bulk_rows=4)
    _, calls, heard, _, _ = _round_in_flight(model, monkeypatch, _ahead_ends, busy)
    assert calls == [(["running"], 1), (["running"], 4), (["running"], 8), (["ahead"], 1)]
    assert [name for name, _ in heard] == ["running", "ahead"]


def test_a_round_takes_joiners_only_early_on(tiny_models, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first frame that comes due once the round has run `join_for_s` (0.1 s; the clock moves
    to 0.11 s in as its first pass starts) waits for the next round: joiners add passes, and the
    next chunks of the streams in the round wait for its end."""
    model = tiny_models["custom_voice"]

    def during(stage, streams, feed) -> None:
        later = SimpleNamespace(monotonic=lambda: 100.11)
        monkeypatch.setattr(decode_stage_module, "time", later)
        stage.open(streams["new"], None)
        feed("new")

    stage, calls, heard, _, codes = _round_in_flight(model, monkeypatch, during)
    assert calls == [(["running"], 1), (["running"], 4), (["running"], 8), (["new"], 1)]
    assert [name for name, _ in heard] == ["running", "new"]
    assert stage.metrics.registry.get_sample_value("voicewire_engine_decode_round_joined_sum") == 0
    np.testing.assert_allclose(dict(heard)["new"], _whole(model, codes["new"][:1]), atol=1e-5)


def test_a_drop_during_a_round_waits_for_its_end_only_for_a_stream_in_it(
    tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """running, in the round, is cancelled while it runs: its row stays its own until the round ends
    (the new stream opened meanwhile gets another), and then it is finished. ahead, not in the round,
    is finished at once, and its row is the one the new stream takes."""
    model = tiny_models["custom_voice"]
    seen: dict[str, object] = {}

    def during(stage, streams, feed) -> None:
        running_row, ahead_row = (stage._streams[streams[n].id].row for n in ("running", "ahead"))
        stage.drop(streams["running"], "cancelled", 14, 14, None)
        stage.drop(streams["ahead"], "cancelled", 3, 3, None)
        stage.open(streams["new"], None)
        feed("new")
        seen.update(running_row=running_row, ahead_row=ahead_row)

    stage, calls, heard, streams, codes = _round_in_flight(model, monkeypatch, during)
    assert calls == [(["running"], 1), (["new"], 1), (["running"], 4), (["running"], 8)]
    assert stage._streams[streams["new"].id].row == seen["ahead_row"] != seen["running_row"]
    assert [name for name, _ in heard] == ["new", "running"]
    assert streams["running"].result is not None and streams["running"].result.reason == "cancelled"
    assert streams["ahead"].result is not None and streams["ahead"].result.reason == "cancelled"
    assert streams["running"].id not in stage._streams and not stage._held
    np.testing.assert_allclose(dict(heard)["new"], _whole(model, codes["new"][:1]), atol=1e-5)


def test_a_decoder_thread_that_breaks_fails_its_streams_and_says_so(tiny_models) -> None:
    """A bug outside a decoder call (here the row reset) ends the decoder's thread: its open streams
    fail with the cause instead of waiting for audio forever, and `on_stop` hears it (the engine
    then refuses new streams)."""
    model = tiny_models["custom_voice"]
    stopped: list[BaseException] = []
    stage = DecoderStage(model.decoder, slots=2, chunks=ChunkSchedule(1, (2,)), on_stop=stopped.append)

    def broken(rows) -> None:
        raise KeyError("row state")

    stage.batch.reset = broken
    stream = Stream(1, model.voice(speaker="vivian"), StreamOptions(), model.tokenizer, lambda: None)
    stop = threading.Event()
    thread = threading.Thread(target=stage.run, args=(stop,))
    thread.start()
    stage.open(stream, None)
    stage.frames([stream], np.arange(16, dtype=np.int64)[None] * 7, [TrackEntry(5, ())])
    thread.join(10)
    stop.set()
    assert not thread.is_alive()
    assert stream.result is not None and stream.result.reason == "error"
    assert "decoding failed: KeyError: 'row state'" in str(stream.result.error)
    assert [type(error) for error in stopped] == [KeyError]
