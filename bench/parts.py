"""`voicewire bench-parts`: the pipeline's GPU pieces timed one at a time, as in the step, prefill
and decoder tables of docs/log/2026-11.md ("One frame, step by step"). The frame step per batch
size and prompt length (which sets the attention span), the batched prefill, the codec decoder per
(batch, frames), and with `profile` the largest kernels of one eager step and one eager decode
(torch.profiler).

Each piece runs as the engine runs it: graphed and fused on CUDA when the config says so, padded
to the same buckets otherwise.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from voicewire.bench.model import BenchModel
from voicewire.engine.config import EngineConfig, GenerationOptions
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.sampling import Draw
from voicewire.engine.runtime.decoder_batch import BatchedDecoder
from voicewire.engine.runtime.frame_step import FrameStepper

PREFILL_ROWS = 20  # a typical first prompt: voice prefix plus a few words


@dataclass(frozen=True)
class PartsSettings:
    batches: tuple[int, ...] = (1, 8, 64, 128, 256)
    positions: tuple[int, ...] = (100,)  # prompt rows before the timed steps: they set the span
    decoder_frames: tuple[int, ...] = (1, 2, 4, 8)
    repeats: int = 20
    whole_kv: bool = False  # attend to every KV position (the span off), for comparison
    profile: bool = False
    top: int = 12  # kernels listed per profile


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Mean wall time of `fn` over `repeats` calls after one warm-up, device work included."""
    fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return round((time.perf_counter() - start) / repeats * 1000, 3)


def _kernels(fn: Callable[[], object], device: torch.device, top: int) -> dict:
    """The device time of one call of `fn`, and its largest kernels (CPU ops off CUDA)."""
    fn()
    _sync(device)
    on_cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if on_cuda else ProfilerActivity.CPU]) as prof:
        fn()
        _sync(device)
    events = prof.key_averages()

    def own(event) -> float:  # microseconds
        return event.self_device_time_total if on_cuda else event.self_cpu_time_total

    timed = [e for e in events if own(e) > 0]
    ranked = sorted(timed, key=own, reverse=True)[:top]
    return {
        "busy_ms": round(sum(own(e) for e in timed) / 1000, 3),
        "kernels": sum(e.count for e in timed),
        "top": [{"name": e.key[:120], "ms": round(own(e) / 1000, 3), "calls": e.count} for e in ranked],
    }


def _stepper(
    model: Qwen3TTS, config: EngineConfig, graphs: bool, slots: int, settings: PartsSettings
) -> FrameStepper:
    stepper = FrameStepper(
        model.talker,
        slots,
        config.kv_length,
        graphs=graphs,
        pad=True,
        max_prefills=config.max_prefills_per_step,
    )
    if settings.whole_kv:
        stepper.spans = [config.kv_length]
    if stepper.buckets is not None:
        # Only the buckets the timed steps use, and 1 for the first frame after a prefill: capturing
        # all 15 at 256 slots takes minutes of a lent GPU.
        used = {next(bucket for bucket in stepper.buckets if bucket >= b) for b in settings.batches}
        stepper.buckets = sorted(used | {1})
    if graphs:
        stepper.capture()
    options = GenerationOptions.from_generation_config(model.generation_config, suppress_eos=True)
    for slot in range(slots):
        stepper.configure(slot, options, seed=slot)
    return stepper


def _rows(model: Qwen3TTS, length: int, gen: torch.Generator) -> torch.Tensor:
    hidden = model.talker.cfg.decoder.hidden_size
    return torch.randn(length, hidden, generator=gen).to(model.device, model.dtype)


def bench_parts(model: Qwen3TTS, config: EngineConfig, settings: PartsSettings) -> dict:
    """Time each piece; returns the JSON report."""
    device = model.device
    kernels = Kernels.resolve(config, device)  # as the engine decides them
    model.use_kernels(kernels)
    graphs = config.cuda_graphs and device.type == "cuda"
    gen = torch.Generator().manual_seed(0)
    report: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "model": str(model.folder),
        "dtype": str(model.dtype).removeprefix("torch."),
        "kv_length": config.kv_length,
        "graphs": graphs,
        "fused_draw": kernels.fused_draw,
        "kernels": dataclasses.asdict(kernels),
        "whole_kv": settings.whole_kv,
    }
    with torch.inference_mode():
        stepper = _stepper(model, config, graphs, max(settings.batches), settings)
        report["step_buckets"] = stepper.buckets
        report["step"] = _step_times(model, stepper, settings, gen)
        report["prefill"] = _prefill_times(model, stepper, settings, gen)
        stepper = None  # its KV and graphs go before the decoder's are made
        report["decoder"] = _decoder_times(model, graphs, settings, gen)
        if settings.profile:
            report["profile"] = _profile(model, config, settings, gen)
    return report


def _step_times(
    model: Qwen3TTS, stepper: FrameStepper, settings: PartsSettings, gen: torch.Generator
) -> list:
    """One frame for B streams whose prompts held `positions` rows; `span` is at the first timed step."""
    text, times = model.text_ids.tts_pad, []
    for length in settings.positions:
        for b in settings.batches:
            stepper.prefill([(slot, _rows(model, length, gen), 0) for slot in range(b)])
            span = stepper.attention_span(b, Draw.TOP_K)
            ms = _time_ms(
                lambda b=b: stepper.step(b, [True] * b, [text] * b).cpu(), model.device, settings.repeats
            )
            times.append({"batch": b, "positions": length, "span": span, "ms": ms})
    return times


def _prefill_times(
    model: Qwen3TTS, stepper: FrameStepper, settings: PartsSettings, gen: torch.Generator
) -> dict:
    """One prompt, a full prefill batch of them, and one prompt plus its first frame back on the host."""
    text, device, repeats = model.text_ids.tts_pad, model.device, settings.repeats
    prompt = _rows(model, PREFILL_ROWS, gen)
    many = min(max(settings.batches), stepper.prefill_batch)
    return {
        "rows": PREFILL_ROWS,
        "one_ms": _time_ms(lambda: stepper.prefill([(0, prompt, 0)]), device, repeats),
        "sequences": many,
        "many_ms": _time_ms(lambda: stepper.prefill([(s, prompt, 0) for s in range(many)]), device, repeats),
        "one_then_first_frame_ms": _time_ms(
            lambda: (stepper.prefill([(0, prompt, 0)]), stepper.step(1, [True], [text]).cpu()),
            device,
            repeats,
        ),
    }


def _decoder_times(model: Qwen3TTS, graphs: bool, settings: PartsSettings, gen: torch.Generator) -> list:
    """One decode call of n frames for B streams."""
    decoder = BatchedDecoder(model.decoder, max(settings.batches), graphs=graphs, pad=True)
    if graphs:
        decoder.capture()
    quantizers, times = model.decoder.cfg.num_quantizers, []
    for b in settings.batches:
        for n in settings.decoder_frames:
            codes = torch.randint(0, model.decoder.cfg.codebook_size, (b, n, quantizers), generator=gen)
            ms = _time_ms(
                lambda b=b, c=codes: decoder.decode(list(range(b)), c), model.device, settings.repeats
            )
            times.append({"batch": b, "frames": n, "ms": ms})
    return times


def _profile(model: Qwen3TTS, config: EngineConfig, settings: PartsSettings, gen: torch.Generator) -> dict:
    """Kernel tables of eager runs of the same shapes: a graph replay hides its kernels."""
    device, text = model.device, model.text_ids.tts_pad
    stepper = _stepper(model, config, False, max(settings.batches), settings)
    tables = {}
    length = settings.positions[0]
    for b in sorted({min(settings.batches), max(settings.batches)}):
        stepper.prefill([(slot, _rows(model, length, gen), 0) for slot in range(b)])
        step = _kernels(lambda b=b: stepper.step(b, [True] * b, [text] * b).cpu(), device, settings.top)
        tables[f"step B={b}, span {stepper.attention_span(b, Draw.TOP_K)}"] = step
    b, n = max(settings.batches), max(settings.decoder_frames)
    decoder = BatchedDecoder(model.decoder, b, pad=True)
    codes = torch.randint(
        0, model.decoder.cfg.codebook_size, (b, n, model.decoder.cfg.num_quantizers), generator=gen
    )
    tables[f"decoder B={b} x {n} frames"] = _kernels(
        lambda: decoder.decode(list(range(b)), codes), device, settings.top
    )
    return tables


def bench_model_parts(model: BenchModel, settings: PartsSettings) -> dict:
    """`voicewire bench-parts`: `model` loaded for the largest batch, then `bench_parts`."""
    config = model.engine_config(max(settings.batches))
    loaded = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)
    return bench_parts(loaded, config, settings)
