"""The decoder stage's scheduling of decode calls (the decoding itself is in test_decoder_batch)."""

import numpy as np

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
