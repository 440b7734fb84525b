"""Who speaks: `Voice`, as a caller holds it and as it crosses processes.

Plain values and NumPy arrays, no tensors: a server's worker processes hold voices (made by the
engine process, kept by content, read from the voice library) without loading PyTorch. The
engine turns the arrays into tensors where it builds a stream's prompt (engine/model/prompt.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Voice:
    """Who speaks and how. Which fields apply depends on the checkpoint's variant."""

    speaker: str | None = None  # CustomVoice
    language: str = "auto"
    instruct: str | None = None  # VoiceDesign; CustomVoice on 1.7B
    xvector: np.ndarray | None = None  # Base: float32 [H] speaker embedding
    ref_codes: np.ndarray | None = None  # Base in-context: int64 [T, 16] codes of the reference audio
    ref_text: str | None = None  # Base in-context: transcript of the reference audio

    def __post_init__(self) -> None:
        # Whatever array-like the caller gave (a list, a tensor), as the engine reads it.
        if self.xvector is not None:
            self.xvector = _array(self.xvector, np.float32)
        if self.ref_codes is not None:
            self.ref_codes = _array(self.ref_codes, np.int64)


def _array(value: object, dtype: type[np.generic]) -> np.ndarray:
    """`value` as a contiguous host array of `dtype`. A tensor (on a GPU, or needing grad, as a
    speaker encoder's output may be) is detached and copied to the host first: NumPy takes
    neither, and this module must not import PyTorch to know one."""
    detach = getattr(value, "detach", None)
    if callable(detach):
        value = detach().cpu()
    return np.ascontiguousarray(value, dtype=dtype)
