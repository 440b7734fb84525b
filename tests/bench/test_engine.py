"""`voicewire bench-engine`'s run: sessions back to back per stream, the engine's activity in the
report, and A/B arms on one engine (the CLI's report is tested in tests/server/test_cli.py)."""

import asyncio
import gc
import logging
import time

import pytest

from voicewire.bench import engine as bench
from voicewire.bench.engine import BenchSettings, run_bench
from voicewire.engine.config import ChunkSchedule, EngineConfig, UrgentChunks
from voicewire.engine.runtime import gc_pauses
from voicewire.engine.runtime.engine import Engine


def test_sessions_run_back_to_back_per_stream(tiny_models) -> None:
    """2 streams x 3 sessions: 6 sessions' audio, and never more than 2 streams open at once, since
    each stream opens its next session only when the one before has ended."""
    settings = BenchSettings(streams=2, frames=5, text_rate=0, sessions_per_stream=3)
    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=4, kv_length=256)) as engine:
        open_stream, seeds, open_at_once = engine.open_stream, [], []

        def counting_open(voice, options=None):
            open_at_once.append(engine.live_streams + 1)
            seeds.append(options.seed)
            return open_stream(voice, options)

        engine.open_stream = counting_open
        report = asyncio.run(run_bench(engine, settings))
    assert report["sessions_per_stream"] == 3 and report["streams"] == 2
    assert report["audio_s"] == pytest.approx(2 * 3 * 5 * 0.08)
    assert len(open_at_once) == 6 and max(open_at_once) == 2
    assert sorted(seeds) == list(range(6))  # every session its own seed


def test_staggered_streams_open_spread_over_the_stagger(tiny_models) -> None:
    """3 streams over 0.6 s: the first sessions open at about 0, 0.2 and 0.4 s; each stream's later
    sessions follow its own."""
    settings = BenchSettings(streams=3, frames=3, text_rate=0, sessions_per_stream=2, stagger_s=0.6)
    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=4, kv_length=256)) as engine:
        open_stream, opened = engine.open_stream, []

        def timed_open(voice, options=None):
            opened.append((options.seed, time.perf_counter()))
            return open_stream(voice, options)

        engine.open_stream = timed_open
        report = asyncio.run(run_bench(engine, settings))
    assert report["stagger_s"] == 0.6 and report["audio_s"] == pytest.approx(3 * 2 * 3 * 0.08)
    at = dict(opened)
    first = [at[2 * i] - at[0] for i in range(3)]  # stream i's first session has seed 2i
    # Never early; late by at most what a busy 2-core machine may hold the event loop.
    assert 0.19 <= first[1] <= 0.35 and 0.39 <= first[2] <= 0.6
    assert all(at[2 * i + 1] > at[2 * i] for i in range(3))


def test_a_negative_stagger_is_refused() -> None:
    with pytest.raises(ValueError, match="stagger_s must be 0 or more"):
        BenchSettings(stagger_s=-1.0)


@pytest.mark.parametrize("field", ["streams", "frames", "sessions_per_stream"])
def test_settings_below_one_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BenchSettings(**{field: 0})


def test_the_report_says_what_the_engine_did(tiny_models) -> None:
    """2 streams x 2 sessions x 5 frames: 20 frames read over the steps, every stream's audio
    through decoder calls, and every sequence started in a prefill round; each run counts its own."""
    settings = BenchSettings(streams=2, frames=5, text_rate=0, sessions_per_stream=2)
    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=4, kv_length=256)) as engine:
        reports = [asyncio.run(run_bench(engine, settings))["engine"] for _ in range(2)]
    for activity in reports:
        assert 10 <= activity["step_ms"]["count"] <= 20  # 5 steps per session at the least
        assert activity["step_ms"]["count"] == activity["step_streams"]["count"]
        assert activity["step_streams"]["total"] == 20
        assert activity["prefill_streams"]["total"] == 4
        assert activity["decode_streams"]["count"] >= 4 and activity["decode_streams"]["total"] >= 4
        assert activity["first_chunk_ms"]["count"] == 4
        assert activity["final_chunk_ms"]["count"] == 4  # one final chunk a session
        # A decoder round is one or more passes; each chunk is in one round and rides in 1+ passes.
        rounds, chunks = activity["decode_round_ms"]["count"], activity["decode_round_chunks"]
        assert 1 <= rounds <= activity["decode_ms"]["count"] and chunks["count"] == rounds
        assert (
            activity["decode_round_urgent"]["total"] <= chunks["total"] <= activity["decode_streams"]["total"]
        )
        for key in ("step_ms", "prefill_launch_ms", "decode_ms"):
            assert activity[key]["total"] > 0 and activity[key]["p50"] <= activity[key]["p95"]


def test_the_report_counts_only_its_run_s_collections(tiny_models, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine notes each garbage collection's pause and a thread of its own observes the notes
    every 0.5 s (`GcPauses`; here every 10 ms, so that the note of a collection before the run is
    observed during it): a full collection just before the run, as bench_engine's
    `freeze_startup_heap` makes (about 0.4 s on a GPU host), is not the run's."""
    monkeypatch.setattr(gc_pauses, "FLUSH_INTERVAL_S", 0.01)
    settings = BenchSettings(streams=2, frames=5, text_rate=0)
    full: list[float] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(time.perf_counter())

    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=4, kv_length=256)) as engine:
        gc.collect()
        gc.callbacks.append(count)
        try:
            activity = asyncio.run(run_bench(engine, settings))["engine"]
        finally:
            gc.callbacks.remove(count)
    assert activity["gc_full_pause_ms"]["count"] == len(full)


def test_arms_take_turns_on_one_engine(tiny_models, caplog: pytest.LogCaptureFixture) -> None:
    """As configured, then each arm, in turn per round and backwards every other round; the
    configured settings come back after."""
    settings = BenchSettings(streams=2, frames=4, text_rate=0)
    config = EngineConfig(max_streams=4, kv_length=256, urgent_chunks=UrgentChunks(bulk_rows=1))
    arms = ["urgent_chunks.in_hand_s=0.5", "prefill_wait.max_s=0.01,prefill_wait.prompts=2"]
    with Engine(tiny_models["custom_voice"], config) as engine:
        seen: list[tuple[float, float, int]] = []
        run = bench.run_bench

        async def recording(engine_, settings_):
            seen.append(
                (
                    engine_.decoder_stage.urgent.in_hand_s,
                    engine_.scheduler.config.prefill_wait.max_s,
                    engine_.scheduler.config.prefill_wait.prompts,
                )
            )
            return await run(engine_, settings_)

        bench.run_bench = recording
        try:
            with caplog.at_level(logging.INFO, logger="voicewire.bench.engine"):
                report = asyncio.run(bench.run_arms(engine, settings, arms, rounds=2))
        finally:
            bench.run_bench = run
        assert engine.config == config and engine.decoder_stage.urgent == config.urgent_chunks
        assert engine.scheduler.config == config
    in_turn = [(0.0, 0.0, 8), (0.5, 0.0, 8), (0.0, 0.01, 2)]
    assert seen == in_turn + in_turn[::-1]
    assert report["rounds"] == 2
    assert [arm["arm"] for arm in report["arms"]] == ["configured", *arms]
    assert report["arms"][1]["settings"]["urgent_chunks"] == {
        "in_hand_s": 0.5,
        "bulk_rows": 1,
        "urgent_rows": 0,
        "join_waiting": False,
        "join_for_s": 0.1,
        "join_final": False,
        "shared_passes": False,
        "busy_streams": 0,
        "busy_bulk_rows": 0,
    }
    assert report["arms"][2]["settings"]["prefill_wait"] == {"max_s": 0.01, "prompts": 2}
    for arm in report["arms"]:
        rates = sorted(r["aggregate_audio_s_per_s"] for r in arm["runs"])
        assert len(rates) == 2
        assert arm["aggregate_audio_s_per_s_median"] == pytest.approx(sum(rates) / 2, abs=1e-3)
        assert all(r["audio_s"] == pytest.approx(2 * 4 * 0.08) for r in arm["runs"])
        # Each run over the configured run of its own round.
        ratios = [
            r["aggregate_audio_s_per_s"] / base["aggregate_audio_s_per_s"]
            for r, base in zip(arm["runs"], report["arms"][0]["runs"], strict=True)
        ]
        assert arm["to_configured"]["rounds"] == pytest.approx(ratios, abs=1e-4)
        assert arm["to_configured"]["median"] == pytest.approx(sum(ratios) / 2, abs=1e-4)
    assert report["arms"][0]["to_configured"] == {"rounds": [1.0, 1.0], "median": 1.0}
    # One line an arm, in the arms' order, before the JSON report.
    lines = [r.getMessage() for r in caplog.records if r.name == "voicewire.bench.engine"]
    assert [line.split(": audio-s/s ")[0] for line in lines] == ["configured", *arms]
    assert "to configured [1.0, 1.0] (median 1.0)" in lines[0]
    rates = ", ".join(f"{r['aggregate_audio_s_per_s']:.1f}" for r in report["arms"][1]["runs"])
    assert lines[1].startswith(f"{arms[0]}: audio-s/s {rates}, to configured ")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("max_streams=8", "SECTION.FIELD=VALUE"),
        ("urgent_chunks.in_hand=1", "has no field 'in_hand'"),
        ("urgent_chunks.in_hand_s=soon", "takes a number"),
        ("urgent_chunks.in_hand_s=-1", "in_hand_s, bulk_rows, urgent_rows, join_for_s, busy_streams and"),
        ("urgent_chunks.busy_streams=320", "busy_streams and busy_bulk_rows go together"),
        ("prefill_wait.prompts=0", "prompts >= 1"),
        ("chunks.frames=3/two", "takes a number"),
        ("urgent_chunks.bulk_rows=1.5", "takes a number"),
        ("urgent_chunks.join_waiting=yes", "takes true or false"),
        ("chunks.frames=3/0", "chunk sizes must be whole numbers >= 1"),
    ],
)
def test_bad_arms_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bench.parse_arm(spec, EngineConfig())


def test_an_arm_writes_a_list_with_slashes_and_fields_apart_with_commas() -> None:
    arm = bench.parse_arm("chunks.frames=3/2/2/4/8", EngineConfig())
    assert arm == {"chunks": ChunkSchedule(first_frames=1, frames=(3, 2, 2, 4, 8))}
    arm = bench.parse_arm("urgent_chunks.in_hand_s=1,urgent_chunks.bulk_rows=128", EngineConfig())
    assert arm == {"urgent_chunks": UrgentChunks(in_hand_s=1.0, bulk_rows=128)}
    arm = bench.parse_arm("urgent_chunks.in_hand_s=1,urgent_chunks.join_waiting=true", EngineConfig())
    assert arm == {"urgent_chunks": UrgentChunks(in_hand_s=1.0, join_waiting=True)}
    assert bench.parse_arm("urgent_chunks.join_waiting=false", EngineConfig()) == {
        "urgent_chunks": UrgentChunks(join_waiting=False)
    }
