"""The decoder stage's scheduling of decode calls (the decoding itself is in test_decoder_batch)."""

import numpy as np
import torch

from voicewire.engine.config import ChunkSchedule, StreamOptions
from voicewire.engine.decode_stage import DecoderStage
from voicewire.engine.segments import TrackEntry
from voicewire.engine.stream import SAMPLES_PER_FRAME, Stream


def test_first_chunks_decode_before_running_streams_chunks(tiny_models) -> None:
    """A new stream's one-frame first chunk is not held behind a running stream's eight frames."""
    model = tiny_models["custom_voice"]
    stage = DecoderStage(model.decoder, slots=4, chunks=ChunkSchedule(1, (8,)))
    calls: list[tuple[int, int]] = []  # (stream row, frames) per decode call, in order
    decode = stage.batch.decode
    stage.batch.decode = lambda rows, codes: calls.append((rows[0], codes.shape[1])) or decode(rows, codes)
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
    stage.batch.decode = lambda rows, codes: calls.append((list(rows), codes.shape[1])) or decode(rows, codes)
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
