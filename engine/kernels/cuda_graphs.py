"""Capturing a fixed-shape piece of work as a CUDA graph (the frame step, the decoder step), and
moving host inputs to the device without waiting for it."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch

STREAM_POOL = 32  # the streams torch pools for each priority (c10's kStreamsPerPoolBits = 5)


def pinned(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` in page-locked memory when it is bound for a CUDA device, to copy with
    non_blocking=True, so the driver need not stage it. (A blocking copy or a scalar write from
    pageable memory waits for every launch before it on the stream; a non_blocking one from
    pageable memory is staged at once and does not: docs/log/2026-11.md, "Host copies".) Each call
    takes a block that the caching host allocator keeps until the copy has run, so the caller may
    build the next input at once."""
    return host.pin_memory() if device.type == "cuda" and host.device.type == "cpu" else host


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` on `device`, queued without waiting for the device (through `pinned`)."""
    return pinned(host, device).to(device, non_blocking=True)


def put_bytes(dst: np.ndarray, src: np.ndarray | bytes | memoryview) -> None:
    """Copy `src` into the contiguous `dst` (as many bytes) holding the GIL, as when staging inputs
    in page-locked memory: numpy lets go of it for copies over 500 elements, and so does every
    torch op, and a thread that lets go waits to take it back while another runs Python."""
    memoryview(dst).cast("B")[:] = memoryview(src).cast("B")


class GraphCapture:
    """One component's CUDA graphs (the frame step's, the decoder's), captured on a stream of its
    own and allocating from one memory pool. Its graphs must replay one at a time.

    Why a stream of its own: cuBLAS keeps one workspace per (handle, stream), and a captured GEMM
    keeps using the workspace of the stream it was captured on. `torch.cuda.graph` captures on one
    process-wide stream unless told otherwise, so the talker's graphs and the decoder's, which
    replay at the same time on two streams, would share one workspace and race on it
    (docs/log/2026-11.md, "the stall", session 49)."""

    _taken: ClassVar[set[int]] = set()  # the CUDA streams that live components capture on, process-wide

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = self._new_stream(device)
        weakref.finalize(self, GraphCapture._taken.discard, self.stream.cuda_stream)
        self._pool = torch.cuda.graph_pool_handle()

    @classmethod
    def _new_stream(cls, device: torch.device) -> torch.cuda.Stream:
        # torch hands out streams from a pool of 32 per priority, round robin: skip any that a live
        # component captures on.
        for _ in range(STREAM_POOL):
            stream = torch.cuda.Stream(device)
            if stream.cuda_stream not in cls._taken:
                cls._taken.add(stream.cuda_stream)
                return stream
        raise RuntimeError(f"every pooled CUDA stream of {device} is taken by a component's graphs")

    def __call__(self, run: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """Warm `run` up on the capture stream (first calls allocate, compile and pick kernels),
        then capture it. The warm-up runs execute for real: the caller makes them harmless."""
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            for _ in range(2):
                run()
        current.wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread (the decoder's) may keep working on its own stream meanwhile.
        with torch.cuda.graph(graph, pool=self._pool, stream=self.stream, capture_error_mode="thread_local"):
            run()
        return graph
