"""Helpers for engine tests: drive streams and gather their chunks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from voicewire.engine.runtime.stream import AudioChunk, Stream


@dataclass
class Heard:
    chunks: list[AudioChunk]

    @property
    def codes(self) -> np.ndarray:
        return np.concatenate([c.codes for c in self.chunks])

    @property
    def audio(self) -> np.ndarray:
        return np.concatenate([c.pcm for c in self.chunks])

    @property
    def text_ids(self) -> np.ndarray:
        return np.concatenate([c.text_ids for c in self.chunks])


async def collect(stream: Stream) -> Heard:
    return Heard([chunk async for chunk in stream])


async def feed(stream: Stream, pieces: list[str], pause: float = 0.0, end: bool = True) -> None:
    for piece in pieces:
        stream.push_text(piece)
        if pause:
            await asyncio.sleep(pause)
    if end:
        stream.end()


async def speak(stream: Stream, pieces: list[str], pause: float = 0.0) -> Heard:
    heard, _ = await asyncio.gather(collect(stream), feed(stream, pieces, pause))
    return heard
