"""Voices kept by content: the same request fields give back the same `Voice` without computing it
again. A Base voice's x-vector and reference codes cost a pass of the speaker encoder and the codec
encoder over the reference audio; a session or a request naming the same audio again pays nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np

from voicewire.engine.voice import Voice

MAX_KEPT_VOICES = 256


def voice_key(fields: Mapping[str, Any]) -> str:
    """A digest of a voice's request fields, arrays and audio by their bytes."""
    digest = hashlib.sha256()
    for name in sorted(fields):
        digest.update(name.encode() + b"=")
        _feed(digest, fields[name])
    return digest.hexdigest()


def _feed(digest: Any, value: object) -> None:
    if hasattr(value, "detach"):  # a PyTorch tensor, maybe on a device (duck-typed: no torch here)
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        digest.update(f"array:{value.dtype.str}:{value.shape};".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, tuple | list):
        digest.update(f"seq:{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


class VoiceCache:
    """The latest `size` voices by key, safe to share between threads. `get` also joins callers
    waiting for the same voice to one computation (in one event loop)."""

    def __init__(self, size: int = MAX_KEPT_VOICES) -> None:
        self.size = size
        self._voices: OrderedDict[str, Voice] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], asyncio.Future[Voice]] = {}

    def lookup(self, key: str) -> Voice | None:
        with self._lock:
            voice = self._voices.get(key)
            if voice is not None:
                self._voices.move_to_end(key)
            return voice

    def keep(self, key: str, voice: Voice) -> None:
        with self._lock:
            self._voices[key] = voice
            self._voices.move_to_end(key)
            while len(self._voices) > self.size:
                self._voices.popitem(last=False)

    def holds(self, voice: Voice) -> bool:
        """Whether this very voice object came from the cache and is still kept."""
        with self._lock:
            return any(kept is voice for kept in self._voices.values())

    async def get(self, fields: Mapping[str, Any], make: Callable[[], Awaitable[Voice]]) -> Voice:
        """The kept voice for `fields`, or `make()`'s, kept for next time (errors are not kept)."""
        key = voice_key(fields)
        voice = self.lookup(key)
        if voice is not None:
            return voice
        loop_key = (key, id(asyncio.get_running_loop()))
        pending = self._pending.get(loop_key)
        if pending is None:
            pending = self._pending[loop_key] = asyncio.ensure_future(make())

            def settled(done: asyncio.Future[Voice]) -> None:
                self._pending.pop(loop_key, None)
                if not done.cancelled() and done.exception() is None:
                    self.keep(key, done.result())

            pending.add_done_callback(settled)
        return await asyncio.shield(pending)
