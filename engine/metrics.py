"""The engine's Prometheus metrics (prometheus-client): where a stream's first audio and a round's
time go, seen from inside the engine.

Each engine has its own registry. Under `voicewire serve` the engine runs in a process of its own,
and prometheus-client's multiprocess mode (`server.metrics_dir`) puts its values beside the server
workers', so every worker's `/metrics` shows them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

SECONDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
GAP_SECONDS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)
GC_SECONDS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
STREAMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.step = self._histogram(
            "step_seconds",
            "One batched frame for every ready stream, from its launch until the host reads its codes "
            "(steps are pipelined: this includes the host's work on the step before)",
            SECONDS,
        )
        self.step_streams = self._histogram("step_streams", "Streams per batched frame", STREAMS)
        self.step_gap = self._histogram(
            "step_gap_seconds",
            "Host time from reading one step's codes to the next launch, when streams step in both "
            "rounds (bookkeeping, admissions, prefills); the GPU idles only for what exceeds the step "
            "already queued",
            GAP_SECONDS,
        )
        self.prefill = self._histogram(
            "prefill_launch_seconds",
            "Host time to embed a round's new prompts and queue their prefills (the GPU work ends "
            "inside the next step)",
            SECONDS,
        )
        self.prefill_streams = self._histogram("prefill_streams", "Sequences started per round", STREAMS)
        self.first_frame = self._histogram(
            "first_frame_seconds",
            "From a stream's first text reaching the engine to its first frame of codes",
            SECONDS,
        )
        self.decode = self._histogram(
            "decode_seconds", "One batched codec decoder call, until its audio is on the host", SECONDS
        )
        self.decode_streams = self._histogram("decode_streams", "Streams per decoder call", STREAMS)
        self.first_chunk = self._histogram(
            "first_chunk_seconds",
            "From a stream's first text reaching the engine to its first audio chunk",
            SECONDS,
        )
        self.gc_pause = self._histogram(
            "gc_pause_seconds",
            "Python garbage collections in the engine's process: every thread waits while one runs",
            GC_SECONDS,
        )
        self.gc_full_pause = self._histogram(
            "gc_full_pause_seconds", "The collections of the oldest generation among them", GC_SECONDS
        )
        self.frames = Counter("voicewire_engine_frames", "Frames of codes made", registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(f"voicewire_engine_{name}", documentation, buckets=buckets, registry=self.registry)
