"""The engine's Prometheus metrics (prometheus-client): where a stream's first audio and a round's
time go, seen from inside the engine.

Each engine has its own registry. Under `voicewire serve` the engine runs in a process of its own,
and prometheus-client's multiprocess mode (`server.metrics`) puts its values beside the server
workers', so every worker's `/metrics` shows them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

SECONDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
STREAMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.step = Histogram(
            "voicewire_engine_step_seconds",
            "One batched frame for every ready stream, until its codes are on the host",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.step_streams = Histogram(
            "voicewire_engine_step_streams",
            "Streams per batched frame",
            buckets=STREAMS,
            registry=self.registry,
        )
        self.prefill = Histogram(
            "voicewire_engine_prefill_launch_seconds",
            "Host time to embed a round's new prompts and queue their prefills (the GPU work ends "
            "inside the next step)",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.prefill_streams = Histogram(
            "voicewire_engine_prefill_streams",
            "Sequences started per round",
            buckets=STREAMS,
            registry=self.registry,
        )
        self.first_frame = Histogram(
            "voicewire_engine_first_frame_seconds",
            "From a stream's first text reaching the engine to its first frame of codes",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.decode = Histogram(
            "voicewire_engine_decode_seconds",
            "One batched codec decoder call, until its audio is on the host",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.decode_streams = Histogram(
            "voicewire_engine_decode_streams",
            "Streams per decoder call",
            buckets=STREAMS,
            registry=self.registry,
        )
        self.first_chunk = Histogram(
            "voicewire_engine_first_chunk_seconds",
            "From a stream's first text reaching the engine to its first audio chunk",
            buckets=SECONDS,
            registry=self.registry,
        )
        self.frames = Counter("voicewire_engine_frames", "Frames of codes made", registry=self.registry)
