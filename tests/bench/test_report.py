"""A `voicewire bench` level's JSON report and a sweep's Markdown table, from runs made up here."""

from voicewire.bench.level import LevelRuns
from voicewire.bench.lookahead import Lookahead
from voicewire.bench.report import comparison, level_report, markdown
from voicewire.bench.session import SessionRun

REPORT_KEYS = {
    "streams",
    "sessions_per_stream",
    "frames_per_stream",
    "text_rate_words_per_s",
    "first_audio_ms",
    "first_audio_from_lookahead_ms",
    "lookahead",
    "sessions_late",
    "speed_x_realtime",
    "underruns",
    "cancel_ms",
    "cancelled_sessions",
    "aggregate_audio_s_per_s",
    "wall_s",
    "session_end_s",
    "client_process_end_s",
    "client_processes",
    "client_cpu_share",
    "session_setup_ms",
    "sessions_per_server_process",
    "server_cpu_cores",
    "server_cpu_cores_by_thread",
    "engine",
    "server",
}


def test_a_level_report_and_its_markdown_row() -> None:
    runs = [
        SessionRun(
            stream=0,
            setup_s=0.01,
            first_audio_s=0.1,
            sent_s=[0.0, 0.05],
            arrivals=[(0.1, 0.1), (0.2, 0.1), (0.9, 0.5)],  # dry from 0.3 to 0.9, having played 0.2 s
            done_s=0.9,
            audio_s=0.7,
            ended_at=101.0,
        ),
        SessionRun(
            stream=1,
            probe=True,
            setup_s=0.02,
            first_audio_s=0.2,
            sent_s=[0.0],  # cancelled before the send that completed the lookahead: no figure
            arrivals=[(0.2, 0.5)],
            done_s=0.4,
            audio_s=0.5,
            cancel_s=0.05,
            ended_at=101.5,
            late_s=0.25,  # on a schedule, it waited for its stream's session before
        ),
    ]
    level = LevelRuns(runs, wall_s=2.0, client_processes=2, started_at=100.0, client_cpu_s=[0.5, 1.0])
    report = level_report(2, 14, 8.0, level, server_processes=[2], lookahead=Lookahead(3, 2, at_end=False))
    assert set(report) == REPORT_KEYS and report["sessions_per_stream"] == 1
    assert report["first_audio_ms"] == {"p50": 150.0, "p95": 195.0, "p99": 199.0, "max": 200.0}
    assert report["first_audio_from_lookahead_ms"]["max"] == 50.0  # the first session's only
    assert report["lookahead"] == {"tokens": 3, "text_messages": 2, "at_end": False}
    assert report["speed_x_realtime"]["min"] == 0.78  # the probe left out: 0.7 s over 0.9 s
    assert report["underruns"]["streams_with_underruns"] == 1 and report["underruns"]["total_gap_s"] == 0.5
    assert report["cancelled_sessions"] == 1 and report["cancel_ms"]["p50"] == 50.0
    assert report["aggregate_audio_s_per_s"] == 0.6
    assert report["sessions_late"] == {
        "count": 1,
        "late_ms": {"p50": 250.0, "p95": 250.0, "p99": 250.0, "max": 250.0},
    }
    assert report["client_process_end_s"] == [1.0, 1.5]  # stream k ran in process k % 2
    assert report["client_cpu_share"] == [0.25, 0.5]
    assert report["sessions_per_server_process"] == [2] and report["engine"] == report["server"] == {}
    sweep = {
        "device": "cpu",
        "model": "tiny",
        "text_rate_words_per_s": 8.0,
        "frames_per_stream": 14,
        "chunks": None,
        "levels": [report],
    }
    table = markdown(sweep).splitlines()
    assert table[0].endswith("chunks (frames): the server's; Opus complexity 5.")
    assert table[-1] == (
        "| 2 | 150.0 / 195.0 / 199.0 | 50.0 / 50.0 / 50.0 | 0.78 / 0.78 | 1, 0.5 | 50.0 | 0.6 | 1.25 / 1.5 |"
    )


def test_builds_side_by_side() -> None:
    level = {
        "streams": 256,
        "sessions_per_stream": 10,
        "aggregate_audio_s_per_s": 1184.887,
        "underruns": {"streams_with_underruns": 2, "total_gap_s": 0.072},
        "first_audio_ms": {"p50": 161.25, "p95": 281.53, "p99": 333.96, "max": 430.22},
        "speed_x_realtime": {"p50": 4.75, "p5": 4.34, "p1": 4.15, "min": 4.0},
        "server_cpu_cores": {"engine": [1.661], "server": [1.518, 1.264]},
        "server_cpu_cores_by_thread": {"server": {"main": 1.1, "codec": 1.5, "other": 0.2}},
        "engine": {
            "step_streams": {"count": 1209, "total": 256000.0, "p50": 187.71, "p95": 249.17},
            "decode_round_chunks": {"count": 224, "total": 27185.0, "p50": 118.08, "p95": 241.81},
            # 300 one-frame passes of 4,000 rows in 1.2 s: 300 µs a frame; none of 2 frames;
            # 100 passes of 4 frames over 1,000 rows in 0.2 s: 50 µs; 200 of 8 over 20,000 rows in 3.2 s: 20 µs.
            "decode_1_frames_ms": {"count": 300, "total": 1200.0, "p50": 3.0, "p95": 9.0},
            "decode_1_frames_streams": {"count": 300, "total": 4000.0, "p50": 10.0, "p95": 30.0},
            "decode_2_frames_ms": {"count": 0, "total": 0.0, "p50": None, "p95": None},
            "decode_2_frames_streams": {"count": 0, "total": 0.0, "p50": None, "p95": None},
            "decode_4_frames_ms": {"count": 100, "total": 200.0, "p50": 2.0, "p95": 3.0},
            "decode_4_frames_streams": {"count": 100, "total": 1000.0, "p50": 9.0, "p95": 20.0},
            "decode_8_frames_ms": {"count": 200, "total": 3200.0, "p50": 15.0, "p95": 20.0},
            "decode_8_frames_streams": {"count": 200, "total": 20000.0, "p50": 100.0, "p95": 128.0},
        },
        "server": {
            "chunk_delivery_ms": {"count": 27185, "total": 1e6, "p50": 28.26, "p95": 125.08},
            "first_chunk_delivery_ms": {"count": 2560, "total": 1e5, "p50": 12.5, "p95": 40.25},
        },
    }
    # A report from a server in the bench's own process has no cores and no server figures.
    alone = {**level, "server_cpu_cores": {}, "server_cpu_cores_by_thread": {}, "engine": {}, "server": {}}
    table = comparison({"main": {"levels": [level]}, "in process": {"levels": [alone]}}).splitlines()
    assert len(table) == 4 and table[0].startswith("| build | streams × sessions | audio-s/s |")
    assert table[2] == (
        "| main | 256 × 10 | 1184.887 | 2 (0.072) | 161.25 / 281.53 | 4.75 / 4.34 | 28.26 / 125.08 | 12.5 / 40.25 "
        "| 1.661; 1.518, 1.264 (main 1.1, codec 1.5) | 1209 / 187.71 | 224 / 118.08 "
        "| 300.0 (300), –, 50.0 (100), 20.0 (200) |"
    )
    assert table[3] == (
        "| in process | 256 × 10 | 1184.887 | 2 (0.072) | 161.25 / 281.53 | 4.75 / 4.34 | – | – | – | – | – | – |"
    )
