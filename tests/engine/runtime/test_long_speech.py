"""An 8-minute stream: the talker restarts many times, memory stays bounded, the audio stays seamless.
(It ran 20 minutes until the suite outgrew its time budget: the bound is reached within the first
minute, and each further minute only repeats the same restarts.)"""

import asyncio
import ctypes
import gc
import os

import numpy as np
import torch

from voicewire.engine.config import ChunkSchedule, EngineConfig, StreamOptions
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.segments import SegmentPolicy

MINUTES = 8
FRAMES = MINUTES * 60 * 25 // 2  # 12.5 frames per second
KV_LENGTH = 160


def _rss_mb() -> float:
    """Resident memory, after handing freed heap pages back: what is held, not how the allocator's
    arenas happen to be fragmented by earlier tests (that alone moved this figure by 15 MB)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _book() -> str:
    sentences = [
        "Chapter {n} begins on a quiet morning.",
        "The fox jumps over the lazy dog, then naps.",
        "Hello there, this is a test of the voice!",
        "How are you today?",
        "Speech synthesis turns text into sound, one frame at a time.",
    ]
    return " ".join(sentences[i % len(sentences)].format(n=i) for i in range(700))


def test_minutes_of_speech_in_bounded_memory_without_clicks(tiny_models) -> None:
    model = tiny_models["custom_voice"]
    config = EngineConfig(
        max_streams=2,
        kv_length=KV_LENGTH,
        segments=SegmentPolicy(sentence_tokens=8, max_tokens=24),
        chunks=ChunkSchedule(first_frames=1, frames=(8, 32)),
    )
    options = StreamOptions(greedy=True, max_frames=FRAMES, suppress_eos=True)
    book = _book()

    async def listen():
        with Engine(model, config) as engine:
            stream = engine.open_stream(await engine.voice(speaker="vivian", language="english"), options)
            for start in range(0, len(book), 500):
                stream.push_text(book[start : start + 500])
            stream.end()
            chunks, positions = [], []
            stored = 0  # bytes this test keeps, to tell its own growth from the engine's
            after_a_tenth = None
            async for chunk in stream:
                chunks.append(chunk)
                stored += chunk.pcm.nbytes + chunk.codes.nbytes + chunk.text_ids.nbytes
                positions.append(int(engine.scheduler.stepper.pos.max()))
                if after_a_tenth is None and chunk.offset // 1920 >= FRAMES // 10:
                    after_a_tenth = _rss_mb() - stored / 2**20
            result = await stream.wait()
            return chunks, positions, (after_a_tenth, _rss_mb() - stored / 2**20), result

    chunks, positions, rss, result = asyncio.run(listen())
    codes = np.concatenate([c.codes for c in chunks])
    text_ids = np.concatenate([c.text_ids for c in chunks])
    audio = np.concatenate([c.pcm for c in chunks])
    assert result.reason == "max_frames" and codes.shape == (FRAMES, 16) and audio.shape == (FRAMES * 1920,)
    assert int((text_ids == model.text_ids.tts_eos).sum()) > 4 * MINUTES  # the talker restarted, many times
    assert max(positions) <= KV_LENGTH  # the KV cache never held more than its bound
    after_a_tenth, at_the_end = rss
    growth = at_the_end - after_a_tenth
    assert growth < 16, f"the engine grew by {growth:.0f} MB between {MINUTES / 10:g} and {MINUTES} minutes"

    # The decoder never restarts: the streamed audio equals one continuous decode of all the codes,
    # so the talker's restarts leave no seam in it.
    state = model.decoder.new_state(1, "cpu", torch.float32)
    with torch.inference_mode():
        for start in range(0, FRAMES, 500):
            block = model.decoder.decode_step(torch.as_tensor(codes[start : start + 500])[None], state)[0]
            streamed = audio[start * 1920 : start * 1920 + block.shape[0]]
            assert np.abs(block.numpy() - streamed).max() < 1e-5, f"frames {start}..{start + 500}"
