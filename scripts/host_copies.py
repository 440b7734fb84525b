"""How long the host waits for one host-to-device copy while a stream is busy (CUDA only).

Queues ~0.6 s of matmuls on a side stream, then times, on the host, one copy onto that stream of
each kind and size: a blocking copy and a non_blocking one from pageable memory, a scalar write
(`t[0] = v`), and pin_memory() with a non_blocking copy. docs/log/2026-11.md ("Host copies") quotes
a run on an H100. Usage: python scripts/host_copies.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

SIZES = (8, 1000, 100_000)  # int64 elements
ROUNDS = 3


def main() -> None:
    device = torch.device("cuda")
    a = torch.randn(8192, 8192, device=device)
    side = torch.cuda.Stream(device)

    def queue_work() -> None:
        for _ in range(30):
            a @ a

    def scalar_write(host: torch.Tensor) -> None:
        target = torch.empty(host.shape, dtype=host.dtype, device=device)
        target[0] = 5

    kinds: dict[str, Callable[[torch.Tensor], object]] = {
        "blocking, pageable": lambda host: host.to(device),
        "non_blocking, pageable": lambda host: host.to(device, non_blocking=True),
        "scalar write": scalar_write,
        "pin_memory + non_blocking": lambda host: host.pin_memory().to(device, non_blocking=True),
    }
    with torch.cuda.stream(side):
        queue_work()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        queue_work()
        end.record()
        torch.cuda.synchronize()
        print(f"queued work: {start.elapsed_time(end):.0f} ms of GPU")
        for name, copy in kinds.items():
            for size in SIZES:
                times = []
                for _ in range(ROUNDS):
                    host = torch.from_numpy(np.arange(size, dtype=np.int64))
                    queue_work()
                    began = time.perf_counter()
                    copy(host)
                    times.append((time.perf_counter() - began) * 1e3)
                    torch.cuda.synchronize()
                print(f"{name:26s} {size:7d} int64: host ms " + ", ".join(f"{t:.2f}" for t in times))


if __name__ == "__main__":
    main()
