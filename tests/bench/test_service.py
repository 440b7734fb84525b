"""`voicewire bench` end to end on CPU: its report (schema, not numbers) and its Markdown table."""

import gc
import json
from pathlib import Path

import pytest

from tests.bench.test_report import REPORT_KEYS
from voicewire.engine.runtime.metrics import ENGINE_HISTOGRAMS
from voicewire.server.cli import main
from voicewire.server.metrics import SERVER_HISTOGRAMS


def test_bench_reports_every_level(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, table = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["bench", "--streams", "1,4", "--frames", "14", "--text-rate", "25", "--out", str(out)]
    try:
        assert main([*args, "--markdown", str(table), "--kv-length", "128", "--chunks", "1,3"]) == 0
        assert gc.get_freeze_count() > 0  # its in-process server froze its start-up heap, as serve does
    finally:
        gc.unfreeze()
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    assert report["device"] == "cpu" and [level["streams"] for level in report["levels"]] == [1, 4]
    assert report["sessions_per_stream"] == 1 and report["chunks"] == [1, 3]
    for level in report["levels"]:
        assert set(level) == REPORT_KEYS and level["sessions_per_stream"] == 1
        assert level["client_processes"] == 1  # the automatic choice for small levels: in process
        assert level["client_cpu_share"] == []  # in process: its CPU is the server's too
        assert 0 < level["session_setup_ms"]["p50"] <= level["session_setup_ms"]["max"]
        assert set(level["first_audio_ms"]) == {"p50", "p95", "p99", "max"}
        assert level["first_audio_ms"]["p50"] > 0 and level["aggregate_audio_s_per_s"] > 0
        # The tiny checkpoint's tokenizer cuts "Thanks " into 3 tokens or more: the first word
        # completes the lookahead; its figure is the first one less the first send's few microseconds.
        assert level["lookahead"] == {"tokens": 3, "text_messages": 1, "at_end": False}
        after, first = level["first_audio_from_lookahead_ms"], level["first_audio_ms"]
        assert set(after) == set(first)
        assert all(0 <= after[q] <= first[q] for q in first)
        speed = level["speed_x_realtime"]  # the slow tail: less is worse
        assert set(speed) == {"p50", "p5", "p1", "min"}
        assert 0 < speed["min"] <= speed["p1"] <= speed["p5"] <= speed["p50"]
        # Every session ended within the level's wall time; one client process ran them all.
        ended = level["session_end_s"]
        assert 0 < ended["p50"] <= ended["max"] <= level["wall_s"] + 0.01
        assert level["client_process_end_s"] == [pytest.approx(ended["max"], abs=0.01)]
        assert level["sessions_per_server_process"] == [level["streams"]]  # one server process
        assert level["server_cpu_cores"] == {}  # only `voicewire serve`'s processes report their CPU
        assert level["server_cpu_cores_by_thread"] == {}
        assert set(level["underruns"]) == {
            "streams_with_underruns",
            "total",
            "total_gap_s",
            "start_buffer_ms",
            "played_before_gap_s",
        }
        assert set(level["underruns"]["played_before_gap_s"]) == {"p50", "p95", "p99", "max"}
    assert report["cancel_every"] == 4
    assert [level["cancelled_sessions"] for level in report["levels"]] == [0, 1]
    assert report["levels"][1]["cancel_ms"]["p50"] > 0  # the fourth session was cancelled
    # The engine's view of each level's own sessions (the in-process engine's metrics, told apart
    # from the level before by scraping before and after).
    for level in report["levels"]:
        engine = level["engine"]
        assert set(engine) == set(ENGINE_HISTOGRAMS)
        assert engine["first_frame_ms"]["count"] == engine["first_chunk_ms"]["count"] == level["streams"]
        assert 0 < engine["first_frame_ms"]["p50"] <= engine["first_chunk_ms"]["p95"]
        assert engine["first_text_hop_ms"]["count"] == 0  # an engine in process: no way in to time
        # One final chunk a session that ran to its end (a cancel may come after it)
        assert (
            level["streams"] - level["cancelled_sessions"]
            <= engine["final_chunk_ms"]["count"]
            <= level["streams"]
        )
        assert engine["step_ms"]["count"] >= 14 and engine["step_streams"]["p95"] <= level["streams"]
        # Host time between consecutive steps: less in all than the level's wall time.
        gap = engine["step_gap_ms"]
        assert 0 < gap["count"] < engine["step_ms"]["count"]
        assert 0 < gap["total"] < level["wall_s"] * 1000 and engine["step_ms"]["total"] > 0
        # The server's way from the decoder to the socket: every chunk with audio that the
        # sessions' pumps took (the first chunk of each, at least), each timed from its decoding.
        server = level["server"]
        assert set(server) == set(SERVER_HISTOGRAMS)
        delivery = server["chunk_delivery_ms"]
        assert level["streams"] <= delivery["count"] <= 6 * level["streams"]  # chunks 1, 3, 3, 3, 3, 1
        assert 0 < delivery["total"] < level["wall_s"] * 1000 * delivery["count"]
        # In its hops: with the engine in this process, the wait from the decoder to the session
        # and the encoding; they add up to it (each total rounded to 0.01 ms).
        assert server["chunk_engine_send_ms"]["count"] == server["chunk_pipe_ms"]["count"] == 0
        hops = [server["chunk_wait_ms"], server["chunk_encode_ms"]]
        assert [hop["count"] for hop in hops] == [delivery["count"]] * 2
        assert sum(hop["total"] for hop in hops) == pytest.approx(delivery["total"], abs=0.03)
        # A context's first chunk alone: one a session that had audio (a cancel probe may have none).
        first = server["first_chunk_delivery_ms"]
        assert first["count"] == server["first_chunk_encode_ms"]["count"] <= level["streams"]
        assert first["count"] >= level["streams"] - level["cancelled_sessions"]
        assert 0 < first["total"] <= delivery["total"]
    assert table.read_text().count("\n| ") == 3  # header + two levels
    assert "from lookahead p50 / p95 / p99 (ms)" in table.read_text()
    assert "chunks (frames): 1,3; Opus complexity 5." in table.read_text()
