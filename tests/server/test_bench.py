"""`voicewire bench`: its simulated player, and its report (schema, not numbers) on CPU."""

import json
from pathlib import Path

import pytest

from voicewire.server.bench import simulated_underruns
from voicewire.server.cli import main


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
        assert set(level) >= {
            "first_audio_ms",
            "speed_x_realtime",
            "underruns",
            "cancel_ms",
            "aggregate_audio_s_per_s",
        }
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
