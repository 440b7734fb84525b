"""`voicewire bench`: its simulated player, and its report (schema, not numbers) on CPU."""

import asyncio
import json
import socket
from pathlib import Path

import pytest

from tests.server.conftest import RunningServer
from voicewire.server import bench
from voicewire.server.bench import first_speaker, level_report, run_level, simulated_underruns
from voicewire.server.cli import main

REPORT_KEYS = {
    "streams",
    "frames_per_stream",
    "text_rate_words_per_s",
    "first_audio_ms",
    "speed_x_realtime",
    "underruns",
    "cancel_ms",
    "aggregate_audio_s_per_s",
    "wall_s",
    "client_processes",
}


def test_the_simulated_player_counts_gaps() -> None:
    steady = [(0.1 * i, 0.1) for i in range(20)]  # arrives exactly as fast as it plays
    assert simulated_underruns(steady) == (0, 0.0)
    late = [(0.0, 0.1), (0.05, 0.1), (0.1, 0.1), (1.0, 0.1), (1.05, 0.1)]
    # Starts at 0.05 with 0.2 s: plays to 0.35 (with the third piece), waits for the fourth at 1.0.
    assert simulated_underruns(late) == (1, 0.65)
    assert simulated_underruns([(0.0, 0.05)]) == (0, 0.0)  # never reached its start buffer


def test_bench_reports_every_level(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, table = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["bench", "--streams", "1,4", "--frames", "14", "--text-rate", "25", "--out", str(out)]
    assert main([*args, "--markdown", str(table), "--kv-length", "128"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    assert report["device"] == "cpu" and [level["streams"] for level in report["levels"]] == [1, 4]
    for level in report["levels"]:
        assert set(level) == REPORT_KEYS
        assert level["client_processes"] == 1  # the automatic choice for small levels: in process
        assert set(level["first_audio_ms"]) == {"p50", "p95", "p99", "max"}
        assert level["first_audio_ms"]["p50"] > 0 and level["aggregate_audio_s_per_s"] > 0
        assert set(level["underruns"]) == {
            "streams_with_underruns",
            "total",
            "total_gap_s",
            "start_buffer_ms",
        }
    assert report["levels"][1]["cancel_ms"]["p50"] > 0  # the fourth stream was cancelled
    assert table.read_text().count("\n| ") == 3  # header + two levels


def test_the_automatic_client_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 32)
    assert [bench.default_client_processes(n) for n in (1, 64, 65, 256, 1024)] == [1, 1, 2, 4, 8]
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    assert bench.default_client_processes(256) == 1


def test_a_level_spread_over_client_processes(server: RunningServer) -> None:
    streams, frames, rate = 6, 16, 12.0  # text-paced: the cancel comes long before the 16th frame
    level = asyncio.run(run_level(server.url, streams, frames, rate, first_speaker(server.url), processes=2))
    assert level.client_processes == 2 and len(level.runs) == streams
    assert all(run.first_audio_s is not None and run.done_s is not None for run in level.runs)
    # Round-robin over two processes still cancels every fourth stream index, and only those.
    assert [i for i, run in enumerate(level.runs) if run.cancel_s is not None] == [3]
    for i, run in enumerate(level.runs):
        assert run.audio_s == pytest.approx(sum(seconds for _, seconds in run.arrivals))
        if i % 4 != 3:
            assert run.audio_s == pytest.approx(frames * 0.08, abs=0.01)
    # The wall clock runs from the common start: it covers every session, which overlapped.
    assert max(run.done_s for run in level.runs) <= level.wall_s < sum(run.done_s for run in level.runs)

    report = level_report(streams, frames, rate, level)
    assert set(report) == REPORT_KEYS and report["client_processes"] == 2
    total_audio = sum(run.audio_s for run in level.runs)
    assert report["aggregate_audio_s_per_s"] == pytest.approx(total_audio / level.wall_s, rel=1e-3)
    assert report["cancel_ms"]["p50"] > 0 and report["first_audio_ms"]["p50"] > 0
    assert json.loads(json.dumps(report)) == report


def test_a_failing_client_process_fails_the_level() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeError, match=r"bench client process [01] failed: ConnectionRefusedError"):
        asyncio.run(run_level(f"ws://127.0.0.1:{port}", 4, 4, 0.0, None, processes=2))
