"""The engine's Prometheus metrics (prometheus-client): where a stream's first audio and a round's
time go, seen from inside the engine.

Each engine has its own registry. Under `voicewire serve` the engine runs in a process of its own,
and prometheus-client's multiprocess mode (`server.metrics_dir`) puts its values beside the server
workers', so every worker's `/metrics` shows them.

`histogram_report` turns two readings of the histograms (from an exposition: a server's `/metrics`, or
an in-process engine's `EngineMetrics.histograms()`) into what the engine did between them; both
benchmarks report it.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

# Millisecond steps up to 10 ms: one stream's step, decoder pass and first frame all fall there, and
# quantiles interpolated across one 5-10 ms bucket read 7.5 ms for each of them (session 54's c=1).
# Up to 5 s: under a burst of 512 sessions a sixth of the final chunks took over 2 s, and a p95
# read in the +Inf bucket is clamped to the largest bound (session 68 read "2000 ms").
SECONDS = (
    *(ms / 1000 for ms in range(1, 11)),
    *(0.0125, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0),
)
GAP_SECONDS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)
GC_SECONDS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
STREAMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# The frames a row of a decoder pass may have: decoder_batch.GRAPH_FRAMES, not imported from there
# because the server's workers load this module without torch (a test keeps the two equal).
PASS_FRAMES = (1, 2, 4, 8)


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
        self.first_text_hop = self._histogram(
            "first_text_hop_seconds",
            "From a server's first push of a stream's text to the engine process taking it (the "
            "server's outbox and writer thread, the pipe, this process's reader): the way in, which "
            "first_frame_seconds starts after",
            GAP_SECONDS,
        )
        self.first_frame = self._histogram(
            "first_frame_seconds",
            "From a stream's first text reaching the engine to its first frame of codes",
            SECONDS,
        )
        # By the pass's frames a row: a round's passes of 1, 2 and 4 frames carry the chunks that
        # listeners wait for, in few rows, and cost more a frame than its passes of 8.
        self.decode = self._histogram(
            "decode_seconds",
            "One batched codec decoder pass, by its frames a row, until its audio is on the host",
            SECONDS,
            labels=("frames",),
        )
        self.decode_streams = self._histogram(
            "decode_streams", "Streams per decoder pass, by its frames a row", STREAMS, labels=("frames",)
        )
        for frames in PASS_FRAMES:  # every series exists, at zero, before the first pass
            self.decode.labels(frames)
            self.decode_streams.labels(frames)
        self.decode_round = self._histogram(
            "decode_round_seconds",
            "One decoder round: the due chunks of listeners short of audio, then at most bulk_rows of "
            "the others, in shared passes (frames that arrive meanwhile wait for the next round, but "
            "those of listeners waiting now, which join its next pass)",
            SECONDS,
        )
        self.decode_round_chunks = self._histogram("decode_round_chunks", "Chunks per decoder round", STREAMS)
        self.decode_round_urgent = self._histogram(
            "decode_round_urgent", "Chunks of listeners short of audio per decoder round", STREAMS
        )
        self.decode_round_joined = self._histogram(
            "decode_round_joined",
            "Chunks per decoder round that joined it while it ran: of listeners waiting now (a new "
            "stream's first, or one run dry)",
            STREAMS,
        )
        self.first_chunk = self._histogram(
            "first_chunk_seconds",
            "From a stream's first text reaching the engine to its first audio chunk",
            SECONDS,
        )
        self.final_chunk = self._histogram(
            "final_chunk_seconds",
            "From a stream's last frame of codes reaching the decoder to its final chunk (a session "
            "ends, and its client may move on, only then)",
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
        self.player_gap = self._histogram(
            "player_gap_seconds",
            "Gaps a player with a 200 ms start buffer would hear in a stream's audio as it leaves the "
            "decoder, before IPC, Opus and the network (a stream waiting for its text makes them too)",
            SECONDS,
        )
        self.idle_wait = self._histogram(
            "idle_wait_seconds",
            "The scheduler's waits for work while streams are open and none can step, until its next round",
            SECONDS,
        )
        self.idle_streams = Counter(
            "voicewire_engine_idle_streams",
            "Open streams in the rounds where none could step, by what each waited for: start (its "
            "sequence has not started: too little text, or the prefill wait), text, listener (too far "
            "ahead of its reader), end (its last frame in flight)",
            ["reason"],
            registry=self.registry,
        )
        self.frames = Counter("voicewire_engine_frames", "Frames of codes made", registry=self.registry)

    def _histogram(
        self, name: str, documentation: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()
    ) -> Histogram:
        return Histogram(
            f"voicewire_engine_{name}", documentation, labels, buckets=buckets, registry=self.registry
        )

    def histograms(self) -> dict[str, dict[float, float]]:
        """This engine's histograms now, as `read_histograms` reads them from an exposition."""
        return read_histograms(generate_latest(self.registry).decode())


PROCESS_CPU = "voicewire_process_cpu_seconds"
PROCESS_RSS = "voicewire_process_resident_bytes"
THREAD_CPU = "voicewire_process_thread_cpu_seconds"
# Threads are named "voicewire-GROUP" or "voicewire-GROUP_INSTANCE" (a pool's or a connection's).
_THREAD_PREFIX = "voicewire-"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_group(name: str) -> str:
    """The group a thread's CPU counts in: "main", the GROUP of a "voicewire-GROUP[_INSTANCE]"
    thread, or "python" for any other Python thread (a library's)."""
    if name == "MainThread":
        return "main"
    if not name.startswith(_THREAD_PREFIX):
        return "python"
    return name[len(_THREAD_PREFIX) :].split("_", 1)[0]


def _thread_cpu(native_id: int) -> float | None:
    """A thread of this process's CPU seconds (user and system) from Linux's /proc, in clock ticks
    (10 ms); None once it has exited, or off Linux."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            # The fields after the name, which may hold spaces: state, then 10 more, then utime, stime.
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


class ThreadCpu:
    """This process's CPU time by thread group (`thread_group`), each a running total: a thread
    that exits keeps in its group what it had used at the last reading. "other" is the rest, so the
    groups add up to the process's CPU time: threads that are not Python's (PyTorch's, CUDA's), a
    Python thread's time after its last reading, and threads that began and ended between two."""

    def __init__(self) -> None:
        # Each thread (the object: the kernel reuses thread ids) with its group and CPU seconds at
        # the last reading.
        self._live: dict[threading.Thread, tuple[str, float]] = {}
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()  # a sampler thread and a final reading may meet

    def read(self) -> dict[str, float]:
        with self._lock:
            process = time.process_time()
            live: dict[threading.Thread, tuple[str, float]] = {}
            for thread in threading.enumerate():
                native_id = thread.native_id
                seconds = None if native_id is None else _thread_cpu(native_id)
                if seconds is not None:
                    live[thread] = (thread_group(thread.name), seconds)
            for thread, (group, seconds) in self._live.items():
                if thread not in live:
                    self._ended[group] = self._ended.get(group, 0.0) + seconds
            self._live = live
            groups = dict(self._ended)
            for group, seconds in live.values():
                groups[group] = groups.get(group, 0.0) + seconds
            # Ticks round each thread down, so the rest can come out a little negative.
            groups["other"] = max(process - sum(groups.values()), 0.0)
            return groups


def _resident_bytes() -> float | None:
    """This process's resident memory now (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return float(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError):
        return None


class ProcessUsage:
    """This process's CPU time (all threads) and resident memory, as gauges labelled by role
    ("engine" or "server"), set every `interval_s` by a daemon thread (so a reading may be that
    old) and on `stop`. Under `voicewire serve` each process keeps its own values (multiprocess
    mode "all" adds its pid), which prometheus-client's process collector does not do; `voicewire
    bench` turns two CPU readings into the cores each process used, and scripts/soak.py and
    scripts/fuzz.py watch the memory."""

    def __init__(self, role: str, registry: CollectorRegistry, interval_s: float = 0.5) -> None:
        cpu = Gauge(
            PROCESS_CPU,
            "CPU time of this process, all its threads (user and system), by role",
            ["role"],
            registry=registry,
            multiprocess_mode="all",
        )
        rss = Gauge(
            PROCESS_RSS,
            "Resident memory of this process, by role",
            ["role"],
            registry=registry,
            multiprocess_mode="all",
        )
        self._threads = Gauge(
            THREAD_CPU,
            "CPU time of this process by thread group (main: the event loop of a server worker; "
            "codec, talker, decoder, ...; other: the rest, threads not Python's among it), by role",
            ["role", "thread"],
            registry=registry,
            multiprocess_mode="all",
        )
        self._role = role
        self._thread_cpu = ThreadCpu()
        self._cpu, self._rss = cpu.labels(role), rss.labels(role)
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"voicewire-usage_{role}", daemon=True)

    def start(self) -> ProcessUsage:
        self.sample()
        self._thread.start()
        return self

    def sample(self) -> None:
        self._cpu.set(time.process_time())
        for group, seconds in self._thread_cpu.read().items():
            self._threads.labels(self._role, group).set(seconds)
        resident = _resident_bytes()
        if resident is not None:
            self._rss.set(resident)

    def stop(self) -> None:
        self._stopped.set()
        self.sample()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.sample()


def read_process_cpu(exposition: str) -> dict[tuple[str, str], float]:
    """`ProcessUsage`'s CPU seconds in a /metrics exposition, by (role, pid); the pid is "" for a
    server in one process."""
    return cast("dict[tuple[str, str], float]", _samples(exposition, PROCESS_CPU, "role", "pid"))


def read_process_rss(exposition: str) -> dict[tuple[str, str], float]:
    """`ProcessUsage`'s resident bytes in a /metrics exposition, by (role, pid), as above."""
    return cast("dict[tuple[str, str], float]", _samples(exposition, PROCESS_RSS, "role", "pid"))


def read_thread_cpu(exposition: str) -> dict[tuple[str, str, str], float]:
    """`ProcessUsage`'s CPU seconds by thread group, by (role, pid, group)."""
    return cast(
        "dict[tuple[str, str, str], float]", _samples(exposition, THREAD_CPU, "role", "pid", "thread")
    )


def _samples(exposition: str, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """One family's samples in an exposition, by their `labels` ("" for one a sample lacks)."""
    for family in text_string_to_metric_families(exposition):
        if family.name == name:
            return {tuple(s.labels.get(label, "") for label in labels): s.value for s in family.samples}
    return {}


def thread_cores_used(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float], wall_s: float
) -> dict[str, dict[str, float]]:
    """CPU cores each role's thread groups used between two `read_thread_cpu` readings, summed
    over the role's processes, largest first (as `cores_used`: a process that started meanwhile
    counts from 0)."""
    by_role: dict[str, dict[str, float]] = {}
    for (role, pid, group), seconds in after.items():
        used = seconds - before.get((role, pid, group), 0.0)
        if used > 0 and wall_s > 0:
            groups = by_role.setdefault(role, {})
            groups[group] = groups.get(group, 0.0) + used / wall_s
    return {
        role: {group: round(cores, 3) for group, cores in sorted(groups.items(), key=lambda g: -g[1])}
        for role, groups in sorted(by_role.items())
    }


def cores_used(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], wall_s: float
) -> dict:
    """CPU cores each role's processes used between two `read_process_cpu` readings: per process,
    largest first. A process that started meanwhile counts from 0; one that had ended before (its
    last value stays in the metrics folder) is left out."""
    by_role: dict[str, list[float]] = {}
    for (role, pid), seconds in after.items():
        used = seconds - before.get((role, pid), 0.0)
        if used > 0:
            by_role.setdefault(role, []).append(round(used / wall_s, 3) if wall_s > 0 else 0.0)
    return {role: sorted(cores, reverse=True) for role, cores in sorted(by_role.items())}


# The histograms an activity report reads: seconds (reported in ms) or stream counts. A name may
# select the series of some labels (`name{label="value"}`); without, it is the sum of its series.
ENGINE_HISTOGRAMS = {
    "first_text_hop_ms": "voicewire_engine_first_text_hop_seconds",
    "first_frame_ms": "voicewire_engine_first_frame_seconds",
    "first_chunk_ms": "voicewire_engine_first_chunk_seconds",
    "final_chunk_ms": "voicewire_engine_final_chunk_seconds",
    "step_ms": "voicewire_engine_step_seconds",
    "decode_ms": "voicewire_engine_decode_seconds",
    "prefill_launch_ms": "voicewire_engine_prefill_launch_seconds",
    "step_streams": "voicewire_engine_step_streams",
    "step_gap_ms": "voicewire_engine_step_gap_seconds",
    "decode_streams": "voicewire_engine_decode_streams",
    "decode_round_ms": "voicewire_engine_decode_round_seconds",
    "decode_round_chunks": "voicewire_engine_decode_round_chunks",
    "decode_round_urgent": "voicewire_engine_decode_round_urgent",
    "decode_round_joined": "voicewire_engine_decode_round_joined",
    "prefill_streams": "voicewire_engine_prefill_streams",
    "gc_pause_ms": "voicewire_engine_gc_pause_seconds",
    "gc_full_pause_ms": "voicewire_engine_gc_full_pause_seconds",
    "idle_wait_ms": "voicewire_engine_idle_wait_seconds",
    "player_gap_ms": "voicewire_engine_player_gap_seconds",
    **{f"decode_{n}_frames_ms": f'voicewire_engine_decode_seconds{{frames="{n}"}}' for n in PASS_FRAMES},
    **{f"decode_{n}_frames_streams": f'voicewire_engine_decode_streams{{frames="{n}"}}' for n in PASS_FRAMES},
}


SUM = -1.0  # the key of a histogram's sum among its bucket bounds (which are all positive)


def read_histograms(
    exposition: str, names: dict[str, str] = ENGINE_HISTOGRAMS
) -> dict[str, dict[float, float]]:
    """The histograms `names` (the engine's by default) of a /metrics exposition, as cumulative
    counts per upper bound (+inf included), with the sum of the observed values under the key `SUM`:
    of the series a name selects (`name{label="value",...}`), or of all its series."""
    wanted = {name: _selector(name) for name in names.values()}
    found: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(exposition):
        for name, (base, labels) in wanted.items():
            if family.name != base:
                continue
            counts = found.setdefault(name, {})
            for s in family.samples:
                if s.name.endswith(("_bucket", "_sum")) and labels.items() <= s.labels.items():
                    bound = float(s.labels["le"]) if s.name.endswith("_bucket") else SUM
                    counts[bound] = counts.get(bound, 0.0) + s.value
    return found


def _selector(name: str) -> tuple[str, dict[str, str]]:
    """'metric{a="x",b="y"}' -> ('metric', {'a': 'x', 'b': 'y'}); 'metric' -> ('metric', {})."""
    base, _, rest = name.partition("{")
    pairs = (item.split("=", 1) for item in rest.removesuffix("}").split(",") if item)
    return base, {key.strip(): value.strip().strip('"') for key, value in pairs}


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket that holds rank q x count."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def histogram_report(before: dict, after: dict, names: dict[str, str] = ENGINE_HISTOGRAMS) -> dict:
    """What happened between two `read_histograms` of `names` (the engine's by default): per
    histogram its count, total and estimated p50/p95 (from the buckets, so within a bucket's width).
    Empty for a server without them."""
    report = {}
    for key, name in names.items():
        if name not in after:
            continue
        then = before.get(name, {})
        delta = {bound: count - then.get(bound, 0.0) for bound, count in after[name].items()}
        total = delta.pop(SUM, 0.0)
        scale = 1000.0 if key.endswith("_ms") else 1.0
        p50, p95 = histogram_quantile(delta, 0.5), histogram_quantile(delta, 0.95)
        report[key] = {
            "count": int(delta.get(math.inf, 0.0)),
            "total": round(total * scale, 2),
            "p50": None if p50 is None else round(p50 * scale, 2),
            "p95": None if p95 is None else round(p95 * scale, 2),
        }
    return report
