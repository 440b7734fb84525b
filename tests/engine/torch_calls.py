"""Counting the torch calls a piece of host code makes, outside the model work it launches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch.overrides import TorchFunctionMode


class TorchCalls(TorchFunctionMode):
    """Counts torch calls from Python, but not attribute reads, indexing or `.numpy()`: those keep
    the GIL, and torch ops let go of it (a thread then waits to take it back while the engine's
    other threads run Python)."""

    KEEP_GIL = frozenset({"__get__", "__getitem__", "numpy"})

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self._paused = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if not self._paused and name not in self.KEEP_GIL:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))

    def uncounted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` with its own torch calls left out (the model work: a graph replay on CUDA)."""

        def run(*args: Any, **kwargs: Any) -> Any:
            with self._pause():
                return fn(*args, **kwargs)

        return run

    @contextmanager
    def _pause(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
