"""A `voicewire bench` level's sessions, in this process and spread over client processes."""

import asyncio
import json
import socket

import pytest

from tests.bench.test_report import REPORT_KEYS
from tests.server.conftest import RunningServer
from voicewire.bench import level as level_module
from voicewire.bench.level import run_level
from voicewire.bench.load import Load, text_pieces
from voicewire.bench.lookahead import lookahead_send, server_tokenizer
from voicewire.bench.report import level_report
from voicewire.bench.server_http import first_speaker


def test_the_automatic_client_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(level_module.os, "cpu_count", lambda: 32)
    assert [level_module.default_client_processes(n) for n in (1, 64, 65, 256, 1024)] == [1, 1, 2, 4, 8]
    monkeypatch.setattr(level_module.os, "cpu_count", lambda: 2)
    assert level_module.default_client_processes(256) == 1


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


def test_sessions_on_a_schedule_start_on_it_or_late_after_the_one_before(server: RunningServer) -> None:
    """--session-interval: stream i's session j starts (i / streams + j) intervals after the level's
    start, whatever the server's pace, or, when its stream's session before is still open, at that
    one's end, with how late it was."""
    streams, frames, interval = 3, 6, 1.5
    load = Load(
        server.url,
        frames,
        0.0,
        first_speaker(server.url),
        sessions_per_stream=2,
        cancel_every=0,
        session_interval_s=interval,
    )
    level = asyncio.run(run_level(load, streams, processes=1))
    assert [run.stream for run in level.runs] == [0, 0, 1, 1, 2, 2]
    for n, run in enumerate(level.runs):
        scheduled = (run.stream / streams + n % 2) * interval
        assert run.started_at is not None and run.done_s is not None and run.late_s >= 0
        assert run.started_at - level.started_at == pytest.approx(scheduled + run.late_s, abs=0.3)
    for first, second in zip(level.runs[::2], level.runs[1::2], strict=True):
        assert first.ended_at <= second.started_at + 0.01  # never two of a stream at once
    # A stream's first session has none before it; a second is late only after a first that ran
    # past the second's start.
    assert [run.late_s for run in level.runs[::2]] == [0.0] * streams
    report = level_report(streams, frames, 0.0, level)
    assert report["sessions_late"]["count"] == sum(run.late_s > 0 for run in level.runs[1::2])
    assert level.wall_s >= (2 / 3 + 1) * interval  # the last session starts 2.5 s in
