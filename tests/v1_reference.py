"""Protocol v1's own audio for a text, the reference other ways of speaking to the server (the
agent plugins, the ElevenLabs dialect and its clients) are held to."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from voicewire.client import Client


def v1_pcm16(
    url: str,
    text: str,
    *,
    speaker: str,
    rate: int,
    api_key: str | None = None,
    sampling: dict[str, Any] | None = None,
) -> np.ndarray:
    """`text` sent at once on one context, as 16-bit PCM at `rate`."""

    async def speak() -> np.ndarray:
        async with await Client.connect(
            url,
            api_key=api_key,
            voice={"speaker": speaker},
            format={"encoding": "pcm_s16le", "sample_rate": rate},
            **({"sampling": sampling} if sampling else {}),
        ) as client:
            context = client.context()
            await context.push(text)
            await context.end()
            return await context.read_all()

    return np.round(asyncio.run(speak()) * 32767).astype(np.int16)


def assert_same_start(heard: np.ndarray, expected: np.ndarray, more_than: int) -> None:
    """Random weights never say end of speech: the speech guard ends a context some frames after
    its text is all in, which depends on when the text arrived. The lengths may differ; the
    samples both have (more than `more_than` of them) may not."""
    shared = min(heard.size, expected.size)
    assert shared > more_than, (heard.size, expected.size)
    np.testing.assert_array_equal(heard[:shared], expected[:shared])
