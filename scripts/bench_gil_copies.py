"""What a call that lets go of the GIL costs a thread while another thread runs Python (host only).

The engine process runs its scheduler, its decoder and one reader and one sender thread per
server worker, all in one interpreter. A call that releases the GIL (a numpy copy of more than a
few hundred elements, any torch op) must take it back afterwards, and a thread running Python
only lets go of it at its switch interval (5 ms by default). This times, per call, the decoder's
join of a chunk's samples (8 frames, 15,360 float32) as `np.concatenate` did it and as
`decode_stage.join_samples` does; staging a 256-row decoder group's codes (256 x 8 x 16 int64) by
numpy assignment and by `cuda_graphs.put_bytes`; a torch op and a tensor slice (indexing keeps
the GIL); and a server worker's Opus encoding of an 8-frame chunk (32 packets of 20 ms at 48 kHz,
in calls into libopus that let go of the GIL: five packets a call, `server.encoder.OPUS_BLOCK`, and
the last two alone), alone and beside 1 or 2 threads that run Python without pause.
`--switch-interval-ms` sets the interpreter's switch interval first; `--opus-block 1` encodes one
packet a call, as the server did before session 65.

Usage: python scripts/bench_gil_copies.py [--calls N] [--switch-interval-ms MS] [--opus-block N]
       [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from voicewire.engine.kernels.cuda_graphs import put_bytes
from voicewire.engine.runtime.decode_stage import join_samples
from voicewire.server import encoder
from voicewire.server.encoder import AudioEncoder, OutputFormat

SAMPLES = 8 * 1920  # one 8-frame chunk at 24 kHz


def per_call_us(fn: Callable[[int], object], calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls * 1e6


def python_loop(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--switch-interval-ms", type=float, help="the switch interval (5 ms by default)")
    parser.add_argument("--opus-block", type=int, help="Opus packets a libopus call (server.encoder's: 5)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    if args.opus_block is not None:
        encoder.OPUS_BLOCK = args.opus_block
    rows = np.random.default_rng(0).random((64, SAMPLES), dtype=np.float32)  # a decoder pass's output
    small = torch.zeros(16)
    codes = np.ones((256, 8, 16), dtype=np.int64)  # a decoder group's codes
    staged = np.zeros(codes.size, dtype=np.int64)
    opus = AudioEncoder(OutputFormat("opus", 48000))
    speech = (0.1 * np.random.default_rng(1).standard_normal(SAMPLES)).astype(np.float32)
    calls: dict[str, Callable[[int], object]] = {
        "np.concatenate of one piece": lambda i: np.concatenate([rows[i % 64]]),
        "join_samples of one piece": lambda i: join_samples([rows[i % 64]]),
        "join_samples of two pieces": lambda i: join_samples([rows[i % 64], rows[(i + 1) % 64]]),
        "numpy assignment of a group's codes": lambda i: staged.__setitem__(slice(None), codes.reshape(-1)),
        "put_bytes of a group's codes": lambda i: put_bytes(staged, codes),
        "torch add of 16 floats": lambda i: small.add(1.0),
        "torch slice of 16 floats": lambda i: small[1:3],
        "Opus encoding of an 8-frame chunk": lambda i: opus.encode(speech),
    }
    results = []
    for busy_threads in (0, 1, 2):
        stop = threading.Event()
        threads = [threading.Thread(target=python_loop, args=(stop,)) for _ in range(busy_threads)]
        for thread in threads:
            thread.start()
        try:
            for name, fn in calls.items():
                results.append(
                    {
                        "call": name,
                        "python_threads_beside": busy_threads,
                        "us_per_call": round(per_call_us(fn, args.calls), 1),
                    }
                )
                print(json.dumps(results[-1]), flush=True)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    report = {
        "switch_interval_s": sys.getswitchinterval(),
        "opus_block": encoder.OPUS_BLOCK,
        "calls_each": args.calls,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
