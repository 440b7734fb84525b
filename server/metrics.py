"""Prometheus metrics (prometheus-client), one registry per app, served at GET /metrics.

Under `voicewire serve` (several processes, see `server.metrics_dir`) `/metrics` sums the values
every process wrote, the engine's included.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from voicewire.server.codec_pool import JobTimes
from voicewire.server.metrics_dir import MULTIPROCESS_DIR

LATENCY_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
SPEED_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0)
# Up to 5 s: under a burst chunks waited for their codec threads over 2 s at p95, where a quantile
# in the +Inf bucket reads as the largest bound (sessions 61 and 68 read "2000 ms").
HOST_PATH_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0)
# A chunk's way in hops: from a tenth of a millisecond, as one hop of an idle server takes, to the
# seconds its encode hop waits for the codec threads under a burst.
HOP_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

# The histograms `voicewire bench` reports beside the engine's (`engine.metrics.histogram_report`):
# with the engine's player_gap, they tell whether a gap was made before the decoder's output, on
# the server's way to the socket (IPC and Opus, then the send loop), or after it.
SERVER_HISTOGRAMS = {
    "chunk_delivery_ms": "voicewire_chunk_delivery_seconds",
    # chunk_delivery_ms in its hops, which add up to it: the first two from an engine process only
    # (in process, wait is from the decoder).
    "chunk_engine_send_ms": "voicewire_chunk_engine_send_seconds",
    "chunk_pipe_ms": "voicewire_chunk_pipe_seconds",
    "chunk_wait_ms": "voicewire_chunk_wait_seconds",
    "chunk_encode_ms": "voicewire_chunk_encode_seconds",
    # A context's first chunk alone, which its first audio waits for, and its encode hop.
    "first_chunk_delivery_ms": "voicewire_first_chunk_delivery_seconds",
    "first_chunk_encode_ms": "voicewire_first_chunk_encode_seconds",
    # The engine's player again where the audio is queued for the socket, and where it is written.
    "queued_player_gap_ms": "voicewire_queued_player_gap_seconds",
    "socket_player_gap_ms": "voicewire_socket_player_gap_seconds",
    # The codec threads' jobs (server.codec_pool.JobTimes): started past their due time (the
    # threads too few or too busy), and their run, with the part spent off a CPU (the GIL).
    "codec_late_ms": "voicewire_codec_late_seconds",
    "codec_run_ms": "voicewire_codec_run_seconds",
    "codec_stalled_ms": "voicewire_codec_stalled_seconds",
}


class Metrics:
    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, documentation, buckets=buckets, registry=self.registry)

    def _hop(self, name: str, documentation: str) -> Histogram:
        return self._histogram(
            f"voicewire_chunk_{name}_seconds",
            f"{documentation}; a hop of voicewire_chunk_delivery_seconds",
            HOP_BUCKETS,
        )

    def __init__(self, engine_registry: CollectorRegistry | None = None) -> None:
        """`engine_registry`: an engine running in this process, whose metrics are served too."""
        self.engine_registry = engine_registry
        self.registry = CollectorRegistry()
        # livesum: a worker's gauge counts while it runs (summed over workers).
        self.sessions = Gauge(
            "voicewire_sessions",
            "Open WebSocket sessions",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        # By server process: how the kernel spread connections over the workers.
        self.sessions_opened = Counter(
            "voicewire_sessions_opened",
            "WebSocket sessions opened, by server process id",
            ["process"],
            registry=self.registry,
        )
        self.contexts = Gauge(
            "voicewire_contexts",
            "Contexts generating audio",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.first_audio = self._histogram(
            "voicewire_first_audio_seconds",
            "From a context's first text to its first audio message",
            LATENCY_BUCKETS,
        )
        self.speed = self._histogram(
            "voicewire_realtime_factor",
            "Audio seconds made per wall second, per finished context",
            SPEED_BUCKETS,
        )
        self.chunk_delivery = self._histogram(
            "voicewire_chunk_delivery_seconds",
            "From a chunk leaving the engine's decoder to its audio queued for the socket: IPC, the "
            "worker's event loop and the Opus threads",
            HOST_PATH_BUCKETS,
        )
        # The same way in hops, which add up to it.
        self.chunk_engine_send = self._hop(
            "engine_send",
            "From the decoder to its batch written by the engine process (its sender thread, the GIL)",
        )
        self.chunk_pipe = self._hop(
            "pipe", "From the engine process's write to this worker's read of the batch"
        )
        self.chunk_wait = self._hop(
            "wait",
            "From this worker's read to the session taking the chunk: the event loop, and the "
            "context's chunk before it",
        )
        self.chunk_encode = self._hop(
            "encode", "From the session taking the chunk to its audio queued: the codec threads and the codec"
        )
        # A context's first chunk again, alone: its listener waits for it, and the codec threads
        # take it ahead of the chunks of listeners with audio in hand (server.codec_pool).
        self.first_chunk_delivery = self._histogram(
            "voicewire_first_chunk_delivery_seconds",
            "voicewire_chunk_delivery_seconds of a context's first chunk with audio",
            HOST_PATH_BUCKETS,
        )
        self.first_chunk_encode = self._histogram(
            "voicewire_first_chunk_encode_seconds",
            "voicewire_chunk_encode_seconds of a context's first chunk with audio",
            HOP_BUCKETS,
        )
        self.queued_player_gap = self._histogram(
            "voicewire_queued_player_gap_seconds",
            "Gaps a player with a 200 ms start buffer would hear in a context's audio as the server "
            "queues it for the socket: after IPC and Opus, before the send loop",
            HOST_PATH_BUCKETS,
        )
        self.codec_late = self._histogram(
            "voicewire_codec_late_seconds",
            "How long after it was due a codec job (a chunk's Opus, resampling, stretch) started: "
            "waits behind earlier-due jobs, not the deadline order's own wait",
            HOP_BUCKETS,
        )
        self.codec_run = self._histogram(
            "voicewire_codec_run_seconds", "A codec job's wall time, from its start to its end", HOP_BUCKETS
        )
        self.codec_stalled = self._histogram(
            "voicewire_codec_stalled_seconds",
            "The part of a codec job's run its thread spent off a CPU: waiting for the GIL (behind "
            "its worker's event loop) or for a CPU",
            HOP_BUCKETS,
        )
        self.socket_player_gap = self._histogram(
            "voicewire_socket_player_gap_seconds",
            "Gaps a player with a 200 ms start buffer would hear in a context's audio as the server "
            "writes it to the socket (the engine's player_gap, after IPC and Opus; a context waiting "
            "for its text makes them too)",
            HOST_PATH_BUCKETS,
        )
        self.underruns = Counter(
            "voicewire_client_underruns",
            "Underruns reported by clients (playback messages)",
            registry=self.registry,
        )
        self.errors = Counter(
            "voicewire_errors", "Errors sent to clients, by code", ["code"], registry=self.registry
        )
        # Waiting for an engine slot (server/admission.py).
        self.slot_queue = Gauge(
            "voicewire_slot_queue",
            "Contexts and speech requests waiting for an engine stream slot",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.slot_wait = self._histogram(
            "voicewire_slot_wait_seconds",
            "Time a context or speech request waited for an engine stream slot, whatever the outcome",
            LATENCY_BUCKETS,
        )
        self.slot_wait_failures = Counter(
            "voicewire_slot_wait_failures",
            "Waits for a stream slot that ended without one, by reason: timeout (engine_full after "
            "slot_wait_s), queue_full (engine_full at once: slot_queue wait already), cancelled "
            "(the client cancelled or left)",
            ["reason"],
            registry=self.registry,
        )
        self.http_requests = Counter(
            "voicewire_speech_requests",
            "POST /v1/audio/speech requests, by status",
            ["status"],
            registry=self.registry,
        )

        # The voice library (server/voices_api.py).
        self.voices_stored = Gauge(
            "voicewire_voices_stored",
            "Voices in the voice library, as the latest upload or delete saw them",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.voice_uploads = Counter(
            "voicewire_voice_uploads", "Voices cloned and stored (POST /v1/voices)", registry=self.registry
        )
        self.voice_upload_failures = Counter(
            "voicewire_voice_upload_failures",
            "POST /v1/voices refused, by error code",
            ["code"],
            registry=self.registry,
        )
        self.voice_compute = self._histogram(
            "voicewire_voice_compute_seconds",
            "Computing a voice from reference audio: the x-vector, and the reference codes in context",
            LATENCY_BUCKETS,
        )

    def codec_job(self, times: JobTimes) -> None:
        """One codec job's times (`CodecPool`'s `on_job`, from its thread)."""
        self.codec_late.observe(times.late)
        self.codec_run.observe(times.run)
        self.codec_stalled.observe(times.stalled)

    def render(self) -> bytes:
        if MULTIPROCESS_DIR not in os.environ:
            engine = b"" if self.engine_registry is None else generate_latest(self.engine_registry)
            return generate_latest(self.registry) + engine
        every_process = CollectorRegistry()
        multiprocess.MultiProcessCollector(every_process)
        return generate_latest(every_process)
