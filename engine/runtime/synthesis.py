"""Offline synthesis: one utterance with all its text known, through the torch scheduler in this
thread as one talker sequence (as the official generate does), then one decode. `voicewire synth`
and the oracle tests use it; the server streams through the engine instead."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from voicewire.engine.config import EngineConfig, GenerationOptions, StreamOptions
from voicewire.engine.errors import EngineError
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.prompt import build_prompt
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.random_checkpoint import TINY_WARNING
from voicewire.engine.runtime.backend import PassFence
from voicewire.engine.runtime.cpu_threads import use_cpu_threads
from voicewire.engine.runtime.scheduler import Scheduler
from voicewire.engine.runtime.segments import SegmentPolicy, TrackEntry
from voicewire.engine.runtime.stream import SAMPLE_RATE, Stream

log = logging.getLogger(__name__)


@dataclass
class SynthesisRequest:
    """One utterance to synthesize; the voice fields allowed depend on the checkpoint's variant."""

    text: str
    speaker: str | None = None
    language: str = "auto"
    instruct: str | None = None
    ref_audio: tuple[np.ndarray, int] | None = None  # (samples, sample rate)
    ref_text: str | None = None
    speaker_embedding: np.ndarray | None = None
    layout: str | None = None  # None: the official default of the variant
    greedy: bool = False
    seed: int | None = None
    max_frames: int | None = None
    suppress_eos: bool = False  # forces max_frames frames: for benchmarks and comparisons


@dataclass
class SynthesisResult:
    audio: np.ndarray  # float32 [frames * 1920]
    codes: np.ndarray  # int64 [frames, 16], EOS frame excluded
    sample_rate: int = SAMPLE_RATE


@torch.inference_mode()
def synthesize(model: Qwen3TTS, request: SynthesisRequest) -> SynthesisResult:
    """Generate one utterance with all its text known: one stream through the scheduler, in this
    thread, as one talker sequence (as the official generate does); then one decode."""
    options = StreamOptions(
        layout=request.layout or model.default_layout(),
        greedy=request.greedy,
        seed=request.seed,
        max_frames=request.max_frames or model.generation_config.get("max_new_tokens", 8192) - 1,
        suppress_eos=request.suppress_eos,
    )
    voice = model.voice(
        request.speaker,
        request.language,
        request.instruct,
        request.ref_audio,
        request.ref_text,
        request.speaker_embedding,
    )
    prompt = build_prompt(
        model.talker,
        model.tokenizer,
        model.text_ids,
        request.text,
        voice,
        options.layout,
        model.variant,
        model.model_size,
    )
    assert options.max_frames is not None
    config = EngineConfig(
        max_streams=1,
        kv_length=max(64, prompt.prefill.shape[0] + options.max_frames),
        lookahead_tokens=1,
        segments=SegmentPolicy(sentence_tokens=None, max_tokens=None),
    )
    collector = _CodesCollector()
    scheduler = Scheduler(model.parts(), config, collector, max_ahead_samples=None)
    stream = Stream(0, voice, options, model.tokenizer, wake=lambda: None)
    stream.push_text(request.text)
    stream.end()
    generation = GenerationOptions.from_generation_config(
        model.generation_config, greedy=options.greedy, suppress_eos=options.suppress_eos
    )
    scheduler.submit(stream, generation, lookahead=1)
    while collector.reason is None:
        if not scheduler.step():
            raise RuntimeError("synthesis stalled: the scheduler has nothing to do before the end")
    if collector.error is not None:
        raise collector.error
    codes = torch.from_numpy(np.stack(collector.codes) if collector.codes else np.zeros((0, 16), np.int64))
    state = model.decoder.new_state(1, model.device, model.dtype)
    if voice.ref_codes is not None:
        # The official decode runs over reference + new codes and cuts the reference part;
        # warming the causal decoder on the reference codes gives the same samples.
        model.decoder.decode_step(torch.tensor(voice.ref_codes)[None].to(model.device), state)
    audio = (
        model.decoder.decode_step(codes[None].to(model.device), state)[0] if len(codes) else torch.zeros(0)
    )
    return SynthesisResult(audio=audio.float().cpu().numpy(), codes=codes.numpy().astype(np.int64))


class _CodesCollector:
    """A FrameSink that keeps one stream's codes (offline synthesis decodes them at once)."""

    def __init__(self) -> None:
        self.codes: list[torch.Tensor] = []
        self.reason: str | None = None
        self.error: EngineError | None = None

    def open(self, stream: Stream, warmup: torch.Tensor | None) -> None:
        pass

    def frames(
        self, streams: list[Stream], codes: np.ndarray, fed: list[TrackEntry], fence: PassFence | None = None
    ) -> None:
        self.codes.extend(codes)
        if fence is not None:
            fence.open()  # no decoder here to wait for

    def segment_end(self, stream: Stream, flushed: bool) -> None:
        pass

    def drain(self, stream: Stream) -> None:
        pass

    def close(self, stream: Stream, reason: str, frames: int, end_step: int) -> None:
        self.reason = reason

    def drop(
        self, stream: Stream, reason: str, frames: int, end_step: int, error: EngineError | None
    ) -> None:
        self.reason, self.error = reason, error


def load_for_synthesis(model: str, device: str = "cpu", dtype: str = "float32") -> Qwen3TTS:
    """A checkpoint (folder, repo id or 'tiny') loaded as `voicewire synth` runs it: the engine's
    CPU threads, and its draw kernel on CUDA; no compiled pieces, since one offline synthesis
    would spend longer compiling them than it saves."""
    loaded = Qwen3TTS.load(model, device=device, dtype=dtype)
    use_cpu_threads(loaded.device, EngineConfig.cpu_threads)
    loaded.use_kernels(Kernels.resolve(EngineConfig(fuse_kernels=False), loaded.device))
    if loaded.is_builtin_tiny:
        log.warning(TINY_WARNING)
    return loaded


def synthesize_to_file(
    model: Qwen3TTS, request: SynthesisRequest, out: Path, codes_out: Path | None = None
) -> SynthesisResult:
    """`synthesize`, written to `out` (16-bit WAV, its folder made) and the codes to `codes_out` (.npy)."""
    result = synthesize(model, request)
    out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(out, result.audio, result.sample_rate, subtype="PCM_16")
    if codes_out is not None:
        np.save(codes_out, result.codes)
    log.info(
        "wrote %s: %d frames, %.2f s of audio",
        out,
        result.codes.shape[0],
        len(result.audio) / result.sample_rate,
    )
    return result
