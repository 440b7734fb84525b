"""`voicewire bench`: its simulated player, and its report (schema, not numbers) on CPU."""

import asyncio
import gc
import json
import socket
from pathlib import Path

import pytest

from tests.server.conftest import RunningServer
from voicewire.bench import service as bench
from voicewire.bench.service import (
    LOOKAHEAD_TOKENS,
    TEXT,
    Load,
    Lookahead,
    Underruns,
    first_speaker,
    level_report,
    lookahead_send,
    run_level,
    server_tokenizer,
    simulated_underruns,
    start_message,
    text_pieces,
)
from voicewire.engine.config import EngineConfig
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime.metrics import ENGINE_HISTOGRAMS
from voicewire.server.cli import main
from voicewire.server.metrics import SERVER_HISTOGRAMS

REPORT_KEYS = {
    "streams",
    "sessions_per_stream",
    "frames_per_stream",
    "text_rate_words_per_s",
    "first_audio_ms",
    "first_audio_from_lookahead_ms",
    "lookahead",
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
    "engine",
    "server",
}


def test_the_simulated_player_counts_gaps() -> None:
    steady = [(0.1 * i, 0.1) for i in range(20)]  # arrives exactly as fast as it plays
    assert simulated_underruns(steady) == Underruns(0, 0.0, ())
    late = [(0.0, 0.1), (0.05, 0.1), (0.1, 0.1), (1.0, 0.1), (1.05, 0.1), (2.0, 0.1)]
    # Starts at 0.05 with 0.2 s: plays to 0.35 (with the third piece), waits for the fourth at 1.0,
    # having played 0.3 s; then plays to 1.2 and waits for the sixth, having played 0.5 s.
    assert simulated_underruns(late) == Underruns(2, 1.45, (0.3, 0.5))
    assert simulated_underruns([(0.0, 0.05)]) == Underruns(0, 0.0, ())  # never reached its start buffer


def test_the_start_message_asks_for_the_chunk_schedule() -> None:
    plain = start_message(Load("ws://x", 20, 0.0, "aiden"), seed=3)
    assert plain == {
        "type": "start",
        "voice": {"speaker": "aiden"},
        "format": {"encoding": "opus", "sample_rate": 48000},
        "sampling": {"seed": 3},
        "max_frames": 20,
        "suppress_eos": True,
        # Always stated: the bench times first audio from the text that fills this lookahead.
        "buffering": {"lookahead_tokens": 3},
    }
    scheduled = start_message(Load("ws://x", 20, 0.0, None, chunks=(1, 2, 2, 4), lookahead_tokens=5), seed=3)
    assert scheduled["voice"] == {}
    assert scheduled["buffering"] == {
        "lookahead_tokens": 5,
        "first_chunk_frames": 1,
        "chunk_frames": [2, 2, 4],
    }
    with pytest.raises(ValueError, match="lookahead_tokens"):
        Load("ws://x", 20, 0.0, None, lookahead_tokens=0)
    for bad in ((4,), (1, 0), (1, 33), (1, *[2] * 9)):
        with pytest.raises(ValueError, match="chunks"):
            Load("ws://x", 20, 0.0, None, chunks=bad)


def test_the_bench_lookahead_is_the_engines_default() -> None:
    assert LOOKAHEAD_TOKENS == EngineConfig().lookahead_tokens


def test_the_send_that_completes_the_lookahead(tiny_checkpoints) -> None:
    tok = TextTokenizer.from_folder(tiny_checkpoints["custom_voice"])
    pieces = text_pieces(8.0)
    assert "".join(pieces) == TEXT and pieces[:2] == ["Thanks ", "for "]
    # The engine commits a word's tokens with the space after it (the bench sends "word "), so the
    # lookahead is complete once the pieces sent so far hold that many tokens.
    for tokens in (1, 3, 8, 20):
        found = lookahead_send(tok, pieces, tokens)
        assert not found.at_end and found.send == found.messages - 1
        before = len(tok.encode("".join(pieces[: found.messages - 1]).rstrip(" ")))
        upto = len(tok.encode("".join(pieces[: found.messages]).rstrip(" ")))
        assert before < tokens <= upto, tokens
    # Text all at once: its one message; text shorter than the lookahead: the `end` after it.
    assert lookahead_send(tok, [TEXT], 3) == Lookahead(3, 1, at_end=False)
    short = lookahead_send(tok, ["Hi"], 64)
    assert short == Lookahead(64, 1, at_end=True) and short.send == 1
    # A word held back for want of the text after it counts only once that text is sent.
    assert lookahead_send(tok, ["Hello", " there "], 1) == Lookahead(1, 2, at_end=False)


@pytest.mark.parametrize("flag", ["1,two", "4", "1,0", "1,40", "1,2,2,2,2,2,2,2,2,2"])
def test_bench_refuses_a_malformed_chunk_schedule(flag: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):  # argparse, before any server or engine starts
        main(["bench", "--chunks", flag])
    assert "--chunks: expected frame counts like 1,2,4,8 (" in capsys.readouterr().err


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
    assert table.read_text().count("\n| ") == 3  # header + two levels
    assert "from lookahead p50 / p95 / p99 (ms)" in table.read_text()
    assert "chunks (frames): 1,3." in table.read_text()


def test_process_shares_are_the_sessions_each_server_process_opened_in_the_level() -> None:
    before = {"101": 3.0, "102": 1.0, "103": 5.0}
    after = {"101": 7.0, "102": 1.0, "103": 5.0, "104": 2.0}  # 104 started during the level
    assert bench.process_shares(before, after) == [4, 2]
    assert bench.process_shares({}, {}) == []


def test_the_automatic_client_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 32)
    assert [bench.default_client_processes(n) for n in (1, 64, 65, 256, 1024)] == [1, 1, 2, 4, 8]
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    assert bench.default_client_processes(256) == 1


def test_a_level_spread_over_client_processes(server: RunningServer) -> None:
    streams, frames, rate = 6, 16, 12.0  # text-paced: the cancel comes long before the 16th frame
    load = Load(server.url, frames, rate, first_speaker(server.url), sessions_per_stream=2)
    level = asyncio.run(run_level(load, streams, processes=2))
    # Two sessions per stream, back to back, each stream's in order.
    assert level.client_processes == 2
    assert [run.stream for run in level.runs] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert all(run.first_audio_s is not None and run.done_s is not None for run in level.runs)
    for first, second in zip(level.runs[::2], level.runs[1::2], strict=True):
        began = second.ended_at - second.done_s  # the second session began after the first ended
        assert first.ended_at < began + 0.01
    # Round-robin over two processes still cancels every fourth session (stream by stream), and
    # only those: spread over the streams, so no stream stops early.
    assert [i for i, run in enumerate(level.runs) if run.cancel_s is not None] == [3, 7, 11]
    assert [i for i, run in enumerate(level.runs) if run.probe] == [3, 7, 11]
    for run in level.runs:
        assert run.audio_s == pytest.approx(sum(seconds for _, seconds in run.arrivals))
        if not run.probe:
            assert run.audio_s == pytest.approx(frames * 0.08, abs=0.01)
    # The wall clock runs from the common start: it covers every session; the streams overlapped.
    longest = max(a.done_s + b.done_s for a, b in zip(level.runs[::2], level.runs[1::2], strict=True))
    assert longest <= level.wall_s < sum(run.done_s for run in level.runs)

    tokenizer = server_tokenizer(server.url)  # the running server's checkpoint, from GET /ready
    assert tokenizer is not None
    lookahead = lookahead_send(tokenizer, text_pieces(rate), load.lookahead_tokens)
    report = level_report(streams, frames, rate, level, lookahead=lookahead)
    assert (
        set(report) == REPORT_KEYS and report["client_processes"] == 2 and report["sessions_per_stream"] == 2
    )
    # Each session's first audio comes after the send that completed its lookahead, and that send
    # after the first. Sends are recorded in order, `end` last; a session whose 16 frames are out
    # before its text (32 words at 12 words/s) is done and stops sending.
    for run in level.runs:
        assert (
            run.sent_s == sorted(run.sent_s)
            and lookahead.send < len(run.sent_s) <= len(text_pieces(rate)) + 1
        )
        assert run.first_audio_s is not None
        assert 0 <= run.sent_s[lookahead.send] <= run.first_audio_s
    assert 0 <= report["first_audio_from_lookahead_ms"]["p50"] <= report["first_audio_ms"]["p50"]
    assert report["lookahead"]["tokens"] == 3
    # Without the server's tokenizer, the figure is left out rather than guessed.
    blind = level_report(streams, frames, rate, level)
    assert blind["lookahead"] is None and set(blind["first_audio_from_lookahead_ms"].values()) == {None}
    # Each process's last session end, measured on the clock both processes share.
    process_ends = report["client_process_end_s"]
    assert len(process_ends) == 2 and 0 < min(process_ends)
    assert max(process_ends) == pytest.approx(report["session_end_s"]["max"], abs=0.01)
    assert max(process_ends) <= level.wall_s + 0.01
    total_audio = sum(run.audio_s for run in level.runs)
    assert report["aggregate_audio_s_per_s"] == pytest.approx(total_audio / level.wall_s, rel=1e-3)
    assert report["cancel_ms"]["p50"] > 0 and report["first_audio_ms"]["p50"] > 0
    assert report["cancelled_sessions"] == 3
    # Each spawned process's CPU time over the level: it did some work, and one thread's worth at most.
    assert len(level.client_cpu_s) == 2 and all(cpu > 0 for cpu in level.client_cpu_s)
    assert all(0 < share <= 1.05 for share in report["client_cpu_share"])
    assert all(
        run.setup_s is not None and 0 < run.setup_s < run.ended_at - level.started_at for run in level.runs
    )
    assert json.loads(json.dumps(report)) == report


def test_a_failing_client_process_fails_the_level() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeError, match=r"bench client process [01] failed: ConnectionRefusedError"):
        asyncio.run(run_level(Load(f"ws://127.0.0.1:{port}", 4, 0.0, None), 4, processes=2))


def test_cancel_every_zero_runs_every_session_to_its_end(server: RunningServer) -> None:
    frames = 8
    load = Load(server.url, frames, 0.0, first_speaker(server.url), sessions_per_stream=2, cancel_every=0)
    level = asyncio.run(run_level(load, 4, processes=1))
    assert len(level.runs) == 8 and not any(run.probe or run.cancel_s is not None for run in level.runs)
    assert [run.audio_s for run in level.runs] == pytest.approx([frames * 0.08] * 8, abs=0.01)
    assert level_report(4, frames, 0.0, level)["cancelled_sessions"] == 0


def test_bench_refuses_a_negative_cancel_every(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="cancel_every must be 0"):
        Load("ws://127.0.0.1:1", 4, 0.0, None, cancel_every=-1)
    # Before any connection or engine: nothing listens at that address.
    assert main(["bench", "--url", "ws://127.0.0.1:1", "--streams", "1", "--cancel-every", "-1"]) == 2
    assert "--cancel-every must be 0 (no cancels) or more" in caplog.text
