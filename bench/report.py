"""A `voicewire bench` level's statistics as its JSON report (`level_report`), and a sweep's
report as a Markdown table (`markdown`) and a plot (`plot`); builds against each other as one
table (`comparison`)."""

from __future__ import annotations

import numpy as np

from voicewire.bench.level import LevelRuns
from voicewire.bench.lookahead import Lookahead
from voicewire.bench.session import simulated_underruns
from voicewire.engine.runtime.metrics import PASS_FRAMES


def percentiles(values: list[float], low: bool = False) -> dict[str, float | None]:
    """p50 and the tail: the high one (p95, p99, max) for latencies, or with `low` the low one (p5,
    p1, min) for figures where less is worse (speed)."""
    qs, extreme = (("p50", "p5", "p1"), "min") if low else (("p50", "p95", "p99"), "max")
    if not values:
        return dict.fromkeys((*qs, extreme))
    array = np.asarray(values, dtype=np.float64)
    found: dict[str, float | None] = {q: round(float(np.percentile(array, int(q[1:]))), 2) for q in qs}
    found[extreme] = round(float(array.min() if low else array.max()), 2)
    return found


def level_report(
    streams: int,
    frames: int,
    rate: float,
    level: LevelRuns,
    engine: dict | None = None,
    server_processes: list[int] | None = None,
    server: dict | None = None,
    server_cores: dict | None = None,
    lookahead: Lookahead | None = None,
    thread_cores: dict | None = None,
) -> dict:
    """The JSON report of one level's runs, with the engine's view (`histogram_report`), the
    sessions each server process took (`process_shares`), the server's way from the engine to
    the socket (`histogram_report` of `SERVER_HISTOGRAMS`), the cores its processes used
    (`cores_used`) and by thread group (`thread_cores_used`), and first audio from the send that
    completed the lookahead (`lookahead_send`) if given."""
    from voicewire.engine.runtime.playback import START_BUFFER_S  # as in simulated_underruns

    runs, wall = level.runs, level.wall_s
    full = [r for r in runs if not r.probe]  # sessions that ran to the end
    underruns = [simulated_underruns(r.arrivals) for r in full]
    ends = [None if r.ended_at is None else r.ended_at - level.started_at for r in runs]
    processes = level.client_processes
    # Streams go round-robin: process k ran stream indices k, k + P, ...
    last_end = [0.0] * processes
    for run, end in zip(runs, ends, strict=True):
        if end is not None:
            last_end[run.stream % processes] = max(last_end[run.stream % processes], end)
    # From the send that completed the lookahead; a session cancelled or failed before it sent that
    # has no figure (a probe is cancelled after its first audio, so after it in practice).
    from_lookahead = [
        (r.first_audio_s - r.sent_s[lookahead.send]) * 1000
        for r in runs
        if lookahead is not None and r.first_audio_s is not None and len(r.sent_s) > lookahead.send
    ]
    return {
        "streams": streams,
        "sessions_per_stream": len(runs) // max(streams, 1),
        "frames_per_stream": frames,
        "text_rate_words_per_s": rate,
        "first_audio_ms": percentiles([r.first_audio_s * 1000 for r in runs if r.first_audio_s is not None]),
        "first_audio_from_lookahead_ms": percentiles(from_lookahead),
        # Which text message completed the lookahead (1: the first), or the `end` after them all;
        # null when the server's tokenizer was not at hand (server_tokenizer).
        "lookahead": None
        if lookahead is None
        else {"tokens": lookahead.tokens, "text_messages": lookahead.messages, "at_end": lookahead.at_end},
        "session_setup_ms": percentiles([r.setup_s * 1000 for r in runs if r.setup_s is not None]),
        # On a schedule (--session-interval), the sessions that started late, as the stream's one
        # before was still open (the loop closed there), and by how much.
        "sessions_late": {
            "count": sum(1 for r in runs if r.late_s > 0),
            "late_ms": percentiles([r.late_s * 1000 for r in runs if r.late_s > 0]),
        },
        "speed_x_realtime": percentiles([r.audio_s / r.done_s for r in full if r.done_s], low=True),
        "underruns": {
            "streams_with_underruns": sum(1 for u in underruns if u.count),
            "total": sum(u.count for u in underruns),
            "total_gap_s": round(sum(u.gap_s for u in underruns), 3),
            "start_buffer_ms": START_BUFFER_S * 1000,
            "played_before_gap_s": percentiles([p for u in underruns for p in u.played_s]),
        },
        "cancel_ms": percentiles([r.cancel_s * 1000 for r in runs if r.cancel_s is not None]),
        "cancelled_sessions": sum(1 for r in runs if r.probe),
        "aggregate_audio_s_per_s": round(sum(r.audio_s for r in runs) / wall, 3),
        "wall_s": round(wall, 3),
        "session_end_s": percentiles([end for end in ends if end is not None]),
        # Streams go round-robin: process k ran stream indices k, k + P, ...
        "client_process_end_s": [round(end, 3) for end in last_end],
        "client_processes": processes,
        # A spawned client process's CPU time over the level's wall time: near 1.0, the client (one
        # Python thread) and not the server may be what limits the level. Empty when run in process.
        "client_cpu_share": [round(cpu / wall, 3) for cpu in level.client_cpu_s] if wall > 0 else [],
        "sessions_per_server_process": server_processes or [],
        # CPU cores each process of `voicewire serve` used in the level, by role ("engine": the
        # engine process; "server": the workers), largest first; empty for a server in this process.
        "server_cpu_cores": server_cores or {},
        # The same by thread group, summed over each role's processes: where a worker's CPU goes
        # (main: its event loop, codec: Opus and the other encoders, engine-reader: the engine's
        # audio arriving) and the engine process's (talker, decoder, send, read; other: threads not
        # Python's, PyTorch's and CUDA's among them).
        "server_cpu_cores_by_thread": thread_cores or {},
        "engine": engine or {},
        "server": server or {},
    }


def markdown(report: dict) -> str:
    """The sweep as a Markdown table."""
    lines = [
        f"Device: {report['device']}; model: {report['model']}; text rate: {report['text_rate_words_per_s']} words/s; "
        f"{report['frames_per_stream']} frames per session, {report.get('sessions_per_stream', 1)} session(s) "
        f"per stream, {_pacing(report.get('session_interval_s', 0.0))}; chunks (frames): "
        + (",".join(map(str, report["chunks"])) if report.get("chunks") else "the server's")
        + f"; Opus complexity {report.get('opus_complexity', 5)}.",
        "",
        "First audio is timed from the first text sent, and from the send that completed the engine's "
        "text lookahead (its first tokens, as the checkpoint's tokenizer cuts the text).",
        "",
        "| streams | first audio p50 / p95 / p99 (ms) | from lookahead p50 / p95 / p99 (ms) "
        "| speed × real time p50 / p5 | underruns (streams, gap s) "
        "| cancel p50 (ms) | audio-s/s | sessions ended p50 / max (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level in report["levels"]:
        first, speed, under = level["first_audio_ms"], level["speed_x_realtime"], level["underruns"]
        ended, after = level["session_end_s"], level["first_audio_from_lookahead_ms"]
        lines.append(
            f"| {level['streams']} | {first['p50']} / {first['p95']} / {first['p99']} "
            f"| {after['p50']} / {after['p95']} / {after['p99']} | {speed['p50']} / {speed['p5']} | "
            f"{under['streams_with_underruns']}, {under['total_gap_s']} | {level['cancel_ms']['p50']} | "
            f"{level['aggregate_audio_s_per_s']} | {ended['p50']} / {ended['max']} |"
        )
    return "\n".join(lines) + "\n"


def _pacing(interval_s: float) -> str:
    return (
        f"one every {interval_s} s (an open loop; sessions_late in the JSON)"
        if interval_s > 0
        else "back to back"
    )


def _pair(figures: dict, first: str, second: str) -> str:
    return f"{figures.get(first)} / {figures.get(second)}" if figures else "–"


def _cores(level: dict) -> str:
    """The engine process's cores; the workers' (each), and their event loops' and encoders' in all."""
    cores, threads = level.get("server_cpu_cores") or {}, level.get("server_cpu_cores_by_thread") or {}
    if not cores:
        return "–"
    text = f"{sum(cores.get('engine', []))}; {', '.join(map(str, cores.get('server', [])))}"
    server = threads.get("server") or {}
    if server:
        text += f" (main {server.get('main', 0.0)}, codec {server.get('codec', 0.0)})"
    return text


def comparison(reports: dict[str, dict]) -> str:
    """Builds against each other as a Markdown table: a row per level of each named report (as
    scripts/ab_servers.sh writes them), with the figures an A/B reads: throughput, gaps, first
    audio, speed, the chunks' way to the socket (the first chunks' apart), the cores used, the
    engine's steps and decoder rounds, and its decoder passes by size (`_passes`)."""
    lines = [
        "| build | streams × sessions | audio-s/s | streams with gaps (gap s) | first audio p50 / p95 (ms) "
        "| speed p50 / p5 | chunk delivery p50 / p95 (ms) | first chunk delivery p50 / p95 (ms) "
        "| cores: engine; workers (main, codec) "
        "| steps: count / streams p50 | decoder rounds: count / chunks p50 "
        f"| decoder µs a frame (passes), passes of {', '.join(map(str, PASS_FRAMES))} frames |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, report in reports.items():
        for level in report["levels"]:
            engine, server = level.get("engine") or {}, level.get("server") or {}
            steps, rounds = engine.get("step_streams") or {}, engine.get("decode_round_chunks") or {}
            under = level["underruns"]
            lines.append(
                f"| {name} | {level['streams']} × {level.get('sessions_per_stream', 1)} "
                f"| {level['aggregate_audio_s_per_s']} "
                f"| {under['streams_with_underruns']} ({under['total_gap_s']}) "
                f"| {_pair(level['first_audio_ms'], 'p50', 'p95')} "
                f"| {_pair(level['speed_x_realtime'], 'p50', 'p5')} "
                f"| {_pair(server.get('chunk_delivery_ms') or {}, 'p50', 'p95')} "
                f"| {_pair(server.get('first_chunk_delivery_ms') or {}, 'p50', 'p95')} | {_cores(level)} "
                f"| {_pair(steps, 'count', 'p50')} | {_pair(rounds, 'count', 'p50')} | {_passes(engine)} |"
            )
    return "\n".join(lines) + "\n"


def _passes(engine: dict) -> str:
    """For each decoder pass size (frames a row), the pass time a frame in µs (the passes' total
    time over their rows' frames) and the number of passes; "–" for a size without passes."""
    sizes = []
    for n in PASS_FRAMES:
        ms, rows = engine.get(f"decode_{n}_frames_ms") or {}, engine.get(f"decode_{n}_frames_streams") or {}
        if not rows.get("total"):
            sizes.append("–")
            continue
        sizes.append(f"{1000 * ms['total'] / (rows['total'] * n):.1f} ({rows['count']})")
    return "–" if set(sizes) == {"–"} else ", ".join(sizes)


def plot(report: dict, path: str) -> None:
    """Latency and throughput against concurrency (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    n = [level["streams"] for level in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for q in ("p50", "p95"):
        left.plot(n, [level["first_audio_ms"][q] for level in levels], marker="o", label=f"first audio {q}")
    left.set_xscale("log", base=2)
    left.set_xlabel("concurrent streams")
    left.set_ylabel("ms")
    left.legend()
    right.plot(n, [level["aggregate_audio_s_per_s"] for level in levels], marker="o")
    right.set_xscale("log", base=2)
    right.set_xlabel("concurrent streams")
    right.set_ylabel("audio seconds per second")
    fig.suptitle(f"voicewire on {report['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
