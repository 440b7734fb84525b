"""engine/runtime/metrics.py: what the engine did between two readings of its histograms, and the CPU
its process used."""

import mmap
import os
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from voicewire.engine.runtime.decoder_batch import GRAPH_FRAMES
from voicewire.engine.runtime.metrics import (
    ENGINE_HISTOGRAMS,
    PASS_FRAMES,
    SUM,
    EngineMetrics,
    ProcessUsage,
    ThreadCpu,
    cores_used,
    histogram_quantile,
    histogram_report,
    read_histograms,
    read_process_cpu,
    read_process_rss,
    read_thread_cpu,
    thread_cores_used,
    thread_group,
)


def test_engine_report_takes_the_level_out_of_the_histograms() -> None:
    inf = float("inf")
    before = {"voicewire_engine_step_seconds": {0.01: 2.0, 0.02: 2.0, inf: 2.0, SUM: 0.01}}
    # 10 more steps: 4 up to 10 ms, 6 in (10, 20] ms; 0.12 s in all.
    after = {"voicewire_engine_step_seconds": {0.01: 6.0, 0.02: 12.0, inf: 12.0, SUM: 0.13}}
    report = histogram_report(before, after)
    assert report == {"step_ms": {"count": 10, "total": 120.0, "p50": 11.67, "p95": 19.17}}
    assert histogram_report({}, {}) == {}
    # A rank in the +Inf bucket is reported as the largest finite bound, as Prometheus does.
    assert histogram_quantile({0.01: 1.0, inf: 4.0}, 0.95) == 0.01


def test_an_engines_own_histograms_read_as_a_scrape_reads_them() -> None:
    metrics = EngineMetrics()
    before = metrics.histograms()
    assert set(before) == set(ENGINE_HISTOGRAMS.values())  # every one, empty ones too
    for seconds in (0.004, 0.004, 0.015):
        metrics.step.observe(seconds)
    metrics.decode_streams.labels(8).observe(3)
    metrics.decode_streams.labels(1).observe(40)
    metrics.decode.labels(1).observe(0.0025)
    after = metrics.histograms()
    assert after == read_histograms(generate_latest(metrics.registry).decode())
    report = histogram_report(before, after)
    assert set(report) == set(ENGINE_HISTOGRAMS)
    # Two in the (3, 4] ms bucket, one in (12.5, 15]: rank 1.5 at 3 + 1 x 1.5/2, rank 2.85 at
    # 12.5 + 2.5 x 0.85 (14.625, rounded to 14.62).
    assert report["step_ms"] == {"count": 3, "total": 23.0, "p50": 3.75, "p95": 14.62}
    # Without a selector, the sum of the frame counts' series; with one, that count's.
    assert report["decode_streams"]["count"] == 2 and report["decode_streams"]["total"] == 43
    assert report["decode_8_frames_streams"] == {"count": 1, "total": 3.0, "p50": 3.0, "p95": 3.9}
    assert report["decode_1_frames_streams"]["total"] == 40
    assert (
        report["decode_ms"]
        == report["decode_1_frames_ms"]
        == {
            "count": 1,
            "total": 2.5,
            "p50": 2.5,
            "p95": 2.95,
        }
    )
    assert report["decode_2_frames_ms"] == {"count": 0, "total": 0.0, "p50": None, "p95": None}


def test_final_chunks_later_than_two_seconds_read_as_measured_not_clamped() -> None:
    """Under a burst, final chunks came over 2 s after a stream's last frame (session 68): 18 of
    20 at 2.5 s and 2 at 4 s read p50 2.5 s up to 3 s's bound, p95 in the (3, 5] bucket, not 2 s."""
    metrics = EngineMetrics()
    before = metrics.histograms()
    for seconds in (2.5,) * 18 + (4.0,) * 2:
        metrics.final_chunk.observe(seconds)
    report = histogram_report(before, metrics.histograms())["final_chunk_ms"]
    # Rank 10 of 18 in (2, 3]: 2 + 1 x 10/18; rank 19 is the first of 2 in (3, 5]: 3 + 2 x 1/2.
    assert report == {"count": 20, "total": 53000.0, "p50": 2555.56, "p95": 4000.0}


def test_the_decoder_pass_series_are_the_graphed_frame_counts() -> None:
    assert PASS_FRAMES == tuple(sorted(GRAPH_FRAMES))


def test_a_selector_reads_the_series_of_its_labels() -> None:
    registry = CollectorRegistry()
    passes = Histogram("passes_seconds", "", ["frames", "kind"], buckets=(0.01,), registry=registry)
    passes.labels(1, "a").observe(0.005)
    passes.labels(1, "b").observe(0.02)
    passes.labels(8, "a").observe(0.005)
    exposition = generate_latest(registry).decode()
    names = {
        "all": "passes_seconds",
        "one": 'passes_seconds{frames="1"}',
        "one_a": 'passes_seconds{frames="1", kind="a"}',
    }
    found = read_histograms(exposition, names)
    inf = float("inf")
    assert found["passes_seconds"] == {0.01: 2.0, inf: 3.0, SUM: pytest.approx(0.03)}
    assert found['passes_seconds{frames="1"}'] == {0.01: 1.0, inf: 2.0, SUM: pytest.approx(0.025)}
    assert found['passes_seconds{frames="1", kind="a"}'] == {0.01: 1.0, inf: 1.0, SUM: 0.005}
    assert read_histograms(exposition, {"x": 'passes_seconds{frames="2"}'}) == {
        'passes_seconds{frames="2"}': {}
    }


def test_process_cpu_follows_this_process_and_reads_back_as_cores() -> None:
    registry = CollectorRegistry()
    cpu = ProcessUsage("engine", registry, interval_s=0.05).start()
    try:
        before = read_process_cpu(generate_latest(registry).decode())
        assert set(before) == {("engine", "")}  # one process: no pid label
        spin_until = time.process_time() + 0.3
        while time.process_time() < spin_until:  # 0.3 s of CPU on this thread
            pass
        deadline = time.monotonic() + 10
        while (after := read_process_cpu(generate_latest(registry).decode()))[("engine", "")] < spin_until:
            assert time.monotonic() < deadline, "the sampler thread did not set the gauge again"
            time.sleep(0.05)
    finally:
        cpu.stop()
    assert after[("engine", "")] - before[("engine", "")] >= 0.3
    assert read_process_cpu("") == {}
    # Under `voicewire serve` each process has its pid; one that started between the readings
    # counts from 0, one that had ended (6) is left out. Cores: CPU seconds over wall seconds.
    before = {("engine", "7"): 10.0, ("server", "8"): 2.0, ("server", "6"): 5.0}
    after = {("engine", "7"): 30.0, ("server", "8"): 12.0, ("server", "9"): 16.0, ("server", "6"): 5.0}
    assert cores_used(before, after, 10.0) == {"engine": [2.0], "server": [1.6, 1.0]}
    assert cores_used(before, after, 0.0) == {"engine": [0.0], "server": [0.0, 0.0]}


def test_process_memory_follows_this_process() -> None:
    registry = CollectorRegistry()
    usage = ProcessUsage("server", registry, interval_s=0.05).start()
    try:
        before = read_process_rss(generate_latest(registry).decode())[("server", "")]
        # 64 MiB of fresh pages, touched. Not a bytearray: after a big test, malloc hands back
        # heap it holds resident already, and the figure does not move (seen in CI).
        held = mmap.mmap(-1, 64 * 2**20)
        for i in range(0, len(held), 4096):
            held[i] = 1
        deadline = time.monotonic() + 10
        while (
            after := read_process_rss(generate_latest(registry).decode())[("server", "")]
        ) < before + 60 * 2**20:
            assert time.monotonic() < deadline, (before, after)
            time.sleep(0.05)
        held.close()
    finally:
        usage.stop()
    with open("/proc/self/status") as status:  # the kernel's own figure, for scale
        vm_rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    assert 0.5 * vm_rss < read_process_rss(generate_latest(registry).decode())[("server", "")] <= 2 * vm_rss


# /proc gives a thread's user and system time each rounded down to a clock tick, so a reading is
# up to two ticks short and the difference of two readings is off by up to two.
SLACK = 2 / os.sysconf("SC_CLK_TCK")


def _spin(
    seconds: float, spun: threading.Event | None = None, release: threading.Event | None = None
) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass
    if spun is not None and release is not None:
        spun.set()
        release.wait()  # alive until read


def test_thread_groups_from_thread_names() -> None:
    assert thread_group("MainThread") == "main"
    assert thread_group("voicewire-codec_3") == "codec"  # a pool's thread
    assert thread_group("voicewire-send_worker-2") == "send"  # a connection's
    assert thread_group("voicewire-talker_torch") == "talker"
    assert thread_group("voicewire-engine-reader") == "engine-reader"
    assert thread_group("Thread-7 (run)") == "python"  # a library's


def _spun(seconds: float, name: str, read: ThreadCpu) -> dict[str, float]:
    """A thread named `name` spins `seconds` of CPU; `read` after that and before it exits."""
    spun, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_spin, args=(seconds, spun, release), name=name)
    thread.start()
    assert spun.wait(30)
    groups = read.read()
    release.set()
    thread.join()
    return groups


def test_thread_cpu_counts_each_group_and_keeps_what_ended_threads_used() -> None:
    # A group of their own ("spin"): other tests' threads may still run in this process.
    cpu = ThreadCpu()
    before = cpu.read()
    first = _spun(0.3, "voicewire-spin_0", cpu)
    assert first["spin"] - before.get("spin", 0.0) >= 0.3 - SLACK
    # The first thread has exited: its CPU stays in the group, the second one's adds to it.
    second = _spun(0.2, "voicewire-spin_1", cpu)
    assert second["spin"] - before.get("spin", 0.0) >= 0.5 - 2 * SLACK
    _spin(0.1)  # on the main thread
    after = cpu.read()
    assert after["spin"] == second["spin"]  # both gone, both kept
    assert after["main"] - second["main"] >= 0.1 - SLACK
    # The groups add up to the process's CPU time: the rest is "other".
    assert after["other"] >= 0.0
    assert sum(after.values()) == pytest.approx(time.process_time(), abs=0.05)


def test_process_usage_reports_thread_groups_and_reads_back_as_cores() -> None:
    registry = CollectorRegistry()
    usage = ProcessUsage("server", registry, interval_s=0.05).start()
    try:
        before = read_thread_cpu(generate_latest(registry).decode())
        spun, release = threading.Event(), threading.Event()
        worker = threading.Thread(target=_spin, args=(0.3, spun, release), name="voicewire-spin_0")
        worker.start()
        assert spun.wait(30)
        deadline = time.monotonic() + 10
        while (after := read_thread_cpu(generate_latest(registry).decode())).get(
            ("server", "", "spin"), 0.0
        ) < 0.3 - SLACK:
            assert time.monotonic() < deadline, after
            time.sleep(0.05)
        release.set()
        worker.join()
    finally:
        usage.stop()
    assert {group for _, _, group in after} >= {"main", "spin", "usage", "other"}
    cores = thread_cores_used(before, after, 0.5)
    assert set(cores) == {"server"} and cores["server"]["spin"] >= (0.3 - SLACK) / 0.5
    assert next(iter(cores["server"])) == "spin"  # largest first
    # Summed over a role's processes, and a process that started meanwhile counts from 0.
    before = {("server", "8", "main"): 1.0, ("server", "8", "codec"): 2.0}
    after = {("server", "8", "main"): 3.0, ("server", "8", "codec"): 2.5, ("server", "9", "codec"): 1.0}
    assert thread_cores_used(before, after, 2.0) == {"server": {"main": 1.0, "codec": 0.75}}
    assert read_thread_cpu("") == {}
