"""How fast this machine is right now, in a few seconds: so that a benchmark on a lent machine
can say whether the machine, not the build, changed between two servers.

A lent H100 made 1,226 audio-s/s with one server and 747 with the same build an hour later, its
host slower too (a prefill's launch 1.5 -> 2.4 ms); lent machines of one kind differ by 15-20%
(docs/benchmarks.md). `scripts/ab_servers.sh` runs this before each server and writes it beside
that server's report. The figures only compare within one kind of machine.

    python3 -m voicewire.bench.machine   # one JSON line
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import torch


def python_loops_per_s(seconds: float = 0.3) -> float:
    """Millions of iterations a second of a fixed pure-Python loop on one core: the host work of
    the engine's and the workers' event loops is this kind of code."""

    def work() -> int:
        table: dict[int, int] = {}
        for i in range(10_000):
            table[i & 255] = table.get(i & 255, 0) + i
        return len(table)

    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        work()
        done += 10_000
    return done / (time.perf_counter() - started) / 1e6


def _cuda_ms(fn: Callable[[], object], repeats: int) -> float:
    """Milliseconds a call of `fn` takes on the current CUDA stream, after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def cuda_figures(device: torch.device) -> dict[str, float]:
    """A bf16 GEMM's TFLOP/s (the decoder's convs and the talker's projections), a device copy's
    GB/s read and written (the talker's weights and KV at small batches), and the host's cost of
    one kernel launch in µs (what one stream's ~600 kernels a frame wait for)."""
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    gemm_ms = _cuda_ms(lambda: torch.mm(a, b), repeats=20)
    source = torch.empty(256 * 2**20, device=device, dtype=torch.uint8)
    target = torch.empty_like(source)
    copy_ms = _cuda_ms(lambda: target.copy_(source), repeats=20)
    one = torch.zeros(1, device=device)
    launches = 2000
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(launches):
        one.add_(1)
    launched = time.perf_counter() - started
    torch.cuda.synchronize()
    return {
        "gemm_bf16_tflops": round(2 * n**3 / (gemm_ms / 1e3) / 1e12, 1),
        "copy_gb_per_s": round(2 * source.numel() / (copy_ms / 1e3) / 1e9, 1),
        "launch_us": round(launched / launches * 1e6, 2),
    }


def probe() -> dict[str, object]:
    """The machine's figures now: the host's Python rate and, with CUDA, the GPU's."""
    report: dict[str, object] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python_mloops_per_s": round(python_loops_per_s(), 2),
        "device": "cpu",
    }
    if torch.cuda.is_available():
        device = torch.device("cuda")
        report["device"] = torch.cuda.get_device_name(device)
        report |= cuda_figures(device)
    return report


if __name__ == "__main__":
    print(json.dumps(probe()))
