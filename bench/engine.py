"""`voicewire bench-engine`: N concurrent streams through the in-process engine, with text arriving
at an LLM-like rate or all at once and forced frame counts; reports latency and throughput as JSON,
and what the engine did meanwhile (`metrics.histogram_report`, as `voicewire bench` gives it)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import resource
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicewire.bench.model import BenchModel
from voicewire.bench.report import percentiles
from voicewire.bench.trace import summarize_file
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import StreamClosed
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.engine import LIVE_SETTINGS, Engine
from voicewire.engine.runtime.gc_pauses import settle_engine_collector
from voicewire.engine.runtime.handle import StreamHandle
from voicewire.engine.runtime.metrics import histogram_report
from voicewire.engine.runtime.stream import SAMPLE_RATE

log = logging.getLogger(__name__)

BENCH_TEXT = (
    "Thanks for calling. I found your order, and it shipped this morning. It should arrive on "
    "Thursday between nine and noon. Is there anything else I can help you with today? "
)


@dataclass(frozen=True)
class BenchSettings:
    streams: int = 4
    frames: int = 50  # forced frames per stream (EOS suppressed)
    text_rate: float = 20.0  # text tokens per second per stream; 0 pushes all text at once
    speaker: str | None = None
    seed: int = 0
    # Sessions each stream runs back to back: with K > 1 the engine keeps N streams open at all
    # times and admits new ones while others step, as a service under steady traffic does.
    sessions_per_stream: int = 1
    # Stream i opens its first session i/N of this many seconds after the start. Streams that
    # start together step together and start their next sessions in the same rounds; a service's
    # arrive spread out, which is what prefill rounds and decoder passes meet there.
    stagger_s: float = 0.0

    def __post_init__(self) -> None:
        if self.streams < 1 or self.frames < 1 or self.sessions_per_stream < 1:
            raise ValueError("streams, frames and sessions_per_stream must be at least 1")
        if self.stagger_s < 0:
            raise ValueError(f"stagger_s must be 0 or more, not {self.stagger_s}")


@dataclass
class _StreamTiming:
    first_chunk_s: float
    done_s: float
    audio_s: float


@contextlib.contextmanager
def torch_trace(path: Path) -> Iterator[None]:
    """Profile what runs inside (all threads; CUDA kernels too when CUDA is there) and write the
    Chrome trace to `path`."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True, enable_cuda_sync_events=True)
    with torch.profiler.profile(activities=activities, experimental_config=config) as profiler:
        yield
    profiler.export_chrome_trace(str(path))


async def _drive(engine: Engine, stream: StreamHandle, pieces: list[str], rate: float) -> _StreamTiming:
    start = time.perf_counter()

    async def feed() -> None:
        try:
            for i, piece in enumerate(pieces):
                if rate > 0:
                    await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
                stream.push_text(piece)
            stream.end()
        except StreamClosed:  # it reached its forced frame count before the text ran out
            pass

    feeder = asyncio.create_task(feed())
    first = None
    samples = 0
    async for chunk in stream:
        if first is None and chunk.pcm.shape[0]:
            first = time.perf_counter() - start
        samples += chunk.pcm.shape[0]
    await feeder
    done = time.perf_counter() - start
    return _StreamTiming(first if first is not None else done, done, samples / SAMPLE_RATE)


async def run_bench(engine: Engine, settings: BenchSettings) -> dict:
    """Run the streams; returns the JSON-ready report."""
    model = engine.model
    speaker = settings.speaker or (
        sorted(model.talker.cfg.speakers)[0] if model.variant == "custom_voice" else None
    )
    voice_fields: dict = {"speaker": speaker}
    if model.variant == "voice_design":
        voice_fields = {"instruct": "A clear, friendly voice."}
    elif model.variant == "base":
        voice_fields = {"speaker_embedding": np.ones(model.talker.cfg.decoder.hidden_size, np.float32)}
    voice = await engine.voice(**voice_fields)
    # Text pieces are the tokenizer's own tokens, so the rate is in tokens per second.
    ids = model.tokenizer.encode(BENCH_TEXT)
    pieces = [model.tokenizer.decode([i]) for i in ids]
    if settings.text_rate <= 0:
        pieces = [BENCH_TEXT]
    sessions = settings.sessions_per_stream

    async def run_stream(i: int) -> list[_StreamTiming]:
        await asyncio.sleep(settings.stagger_s * i / settings.streams)
        timings = []
        for k in range(sessions):  # each session opens when the one before has ended
            seed = settings.seed + i * sessions + k
            options = StreamOptions(seed=seed, max_frames=settings.frames, suppress_eos=True)
            timings.append(
                await _drive(engine, engine.open_stream(voice, options), pieces, settings.text_rate)
            )
        return timings

    if engine.model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.model.device)
    # The collector's pauses reach the histograms from a thread every 0.5 s (GcPauses): those of
    # before the run (bench_engine's freeze_startup_heap, ~0.4 s on a GPU host) are observed
    # first, and those of its last moments before the report.
    engine.gc_pauses.flush()
    before = engine.metrics.histograms()
    started = time.perf_counter()
    per_stream = await asyncio.gather(*(run_stream(i) for i in range(settings.streams)))
    wall = time.perf_counter() - started
    engine.gc_pauses.flush()
    activity = histogram_report(before, engine.metrics.histograms())
    timings = [t for stream_timings in per_stream for t in stream_timings]
    if engine.model.device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(engine.model.device) / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    audio = sum(t.audio_s for t in timings)
    return {
        "device": str(engine.model.device),
        "device_name": torch.cuda.get_device_name(engine.model.device)
        if engine.model.device.type == "cuda"
        else "cpu",
        "model": str(engine.model.folder),
        "dtype": str(engine.model.dtype).removeprefix("torch."),
        "streams": settings.streams,
        "frames_per_stream": settings.frames,
        "sessions_per_stream": sessions,
        "stagger_s": settings.stagger_s,
        "text_rate_tokens_per_s": settings.text_rate,
        "first_chunk_ms": percentiles([t.first_chunk_s * 1000 for t in timings]),
        "speed_x_realtime": percentiles([t.audio_s / t.done_s for t in timings], low=True),
        "aggregate_audio_s_per_s": round(audio / wall, 3),
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "peak_memory_mb": round(peak_mb, 1),
        "peak_memory_kind": "cuda_allocated" if engine.model.device.type == "cuda" else "process_rss",
        "engine": activity,
    }


def parse_arm(spec: str, config: EngineConfig) -> dict[str, Any]:
    """An arm of an A/B, `section.field=value[,...]` over the engine's live settings
    (`engine.LIVE_SETTINGS`), as keywords for `Engine.tune`; a list is written with slashes
    (`chunks.frames=3/2/2/4/8`). Raises ValueError for anything else."""
    changed: dict[str, dict[str, Any]] = {}
    for item in spec.split(","):
        name, _, value = item.strip().partition("=")
        section, _, key = name.partition(".")
        if section not in LIVE_SETTINGS or not value:
            raise ValueError(
                f"arm {spec!r}: expected SECTION.FIELD=VALUE with SECTION one of {', '.join(LIVE_SETTINGS)}"
            )
        current = getattr(config, section)
        if key not in {f.name for f in dataclasses.fields(current)}:
            raise ValueError(f"arm {spec!r}: {section} has no field {key!r}")
        kind = type(getattr(current, key))
        if kind is bool:  # bool("false") is True
            if value not in ("true", "false"):
                raise ValueError(f"arm {spec!r}: {name} takes true or false, got {value!r}")
            parsed: Any = value == "true"
        else:
            try:
                parsed = tuple(int(v) for v in value.split("/")) if kind is tuple else kind(value)
            except ValueError:
                raise ValueError(f"arm {spec!r}: {name} takes a number, got {value!r}") from None
        changed.setdefault(section, {})[key] = parsed
    return {
        section: dataclasses.replace(getattr(config, section), **fields)
        for section, fields in changed.items()
    }


def parse_arms(specs: list[str], rounds: int, config: EngineConfig) -> dict[str, dict[str, Any]]:
    """The arms of an A/B by label, the configured one first, as keywords for `Engine.tune`; raises
    ValueError for a bad arm or fewer than one round (before a model is loaded for nothing)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    return {"configured": {}} | {spec: parse_arm(spec, config) for spec in specs}


async def run_arms(engine: Engine, settings: BenchSettings, arms: list[str], rounds: int) -> dict:
    """The same run as configured and under each arm (`parse_arms`) in turn, `rounds` times over, on
    one engine: one load and one graph capture for all, and the arms interleaved so that a drift of
    the machine's speed falls on all of them. Every other round runs them backwards (A B C, C B A):
    a lent H100 sped up by 2-12% from one round to the next, which one order hands to the arms run
    last, and a steady drift cancels over an even number of rounds. Each arm's runs are also read
    against the configured run of their round (`to_configured`). The engine's settings come back
    after."""
    tunings = parse_arms(arms, rounds, engine.config)
    configured = {name: getattr(engine.config, name) for name in LIVE_SETTINGS}
    runs: dict[str, list[dict]] = {label: [] for label in tunings}
    order = list(tunings.items())
    try:
        for round_ in range(rounds):
            for label, tuning in order if round_ % 2 == 0 else order[::-1]:
                # Between runs no stream is open: nothing waits under the settings before.
                engine.tune(**(configured | tuning))
                runs[label].append(await run_bench(engine, settings))
    finally:
        engine.tune(**configured)
    baseline = [r["aggregate_audio_s_per_s"] for r in runs["configured"]]
    ratios = {
        label: _to_configured([r["aggregate_audio_s_per_s"] for r in arm_runs], baseline)
        for label, arm_runs in runs.items()
    }
    for label, arm_runs in runs.items():  # the A/B at a glance, above the JSON report
        log.info(
            "%s: audio-s/s %s, to configured %s (median %s); first chunk p50 / p95 ms %s",
            label,
            ", ".join(f"{r['aggregate_audio_s_per_s']:.1f}" for r in arm_runs),
            ratios[label]["rounds"],
            ratios[label]["median"],
            ", ".join(f"{r['first_chunk_ms']['p50']} / {r['first_chunk_ms']['p95']}" for r in arm_runs),
        )
    return {
        "rounds": rounds,
        "order": "the arms in turn, every other round backwards",
        "arms": [
            {
                "arm": label,
                "settings": {
                    name: dataclasses.asdict(value) for name, value in (configured | tuning).items()
                },
                "aggregate_audio_s_per_s_median": round(
                    statistics.median(r["aggregate_audio_s_per_s"] for r in runs[label]), 3
                ),
                "to_configured": ratios[label],
                "runs": runs[label],
            }
            for label, tuning in tunings.items()
        ],
    }


def _to_configured(rates: list[float], baseline: list[float]) -> dict[str, Any]:
    """An arm's audio-s/s over the configured run's of the same round, each round and their median:
    a machine's drift between rounds moves both runs of a round alike."""
    ratios = [rate / base if base > 0 else None for rate, base in zip(rates, baseline, strict=True)]
    known = [r for r in ratios if r is not None]
    return {
        "rounds": [None if r is None else round(r, 4) for r in ratios],
        "median": round(statistics.median(known), 4) if known else None,
    }


def bench_engine(
    model: BenchModel,
    settings: BenchSettings,
    variant: str = "custom_voice",
    warmup: int = 4,
    arms: list[str] | None = None,
    rounds: int = 1,
    trace: Path | None = None,
) -> dict:
    """`voicewire bench-engine`: `model` loaded once, a warm-up stream of `warmup` frames (0: none),
    then the run (`run_bench`), or with `arms` the A/B (`run_arms`, `rounds` times), or the run
    traced into `trace` (`torch_trace`) and summarized in the report (`trace.summarize`); returns the
    report. Bad arms are refused before loading."""
    config = model.engine_config(settings.streams, variant)
    if arms:
        parse_arms(arms, rounds, config)
    loaded = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)

    async def bench() -> dict:
        with Engine(loaded, config) as engine:
            if warmup:  # first calls pay one-time costs (allocator, kernels)
                await run_bench(engine, BenchSettings(streams=1, frames=warmup, text_rate=0))
            settle_engine_collector()  # as the engine's process of `voicewire serve` does
            if arms:
                return await run_arms(engine, settings, arms, rounds)
            if trace is None:
                return await run_bench(engine, settings)
            with torch_trace(trace):
                report = await run_bench(engine, settings)
            return report | {"trace": summarize_file(trace)}

    return asyncio.run(bench())
