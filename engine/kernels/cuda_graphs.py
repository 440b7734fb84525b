"""Capturing a fixed-shape piece of work as a CUDA graph (the frame step, the decoder step), and
moving host inputs to the device without waiting for it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


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


def capture(run: Callable[[], None], device: torch.device, pool: tuple | None) -> torch.cuda.CUDAGraph:
    """Warm `run` up on a side stream (first calls allocate, compile and pick kernels), then
    capture it, allocating from `pool` (None: a new one; graphs replayed one at a time may share).

    The warm-up runs execute for real: the caller makes them harmless to its state."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: another thread (the decoder's) may keep working on its own stream meanwhile.
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        run()
    return graph
