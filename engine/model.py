"""Qwen3TTS: one loaded checkpoint (talker, tokenizer, codec, speaker encoder) and offline synthesis."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from voicewire.engine import checkpoint, codec_decoder, codec_encoder, speaker_encoder, talker, text_tokenizer
from voicewire.engine.backend import ModelParts
from voicewire.engine.checkpoint import CheckpointError
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineError
from voicewire.engine.frame_step import GenerationOptions
from voicewire.engine.kernels import Kernels
from voicewire.engine.prompt import TextIds, Voice, build_prompt
from voicewire.engine.scheduler import Scheduler
from voicewire.engine.segments import SegmentPolicy, TrackEntry
from voicewire.engine.stream import Stream
from voicewire.engine.tiny import builtin_tiny_checkpoint

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000


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


class Qwen3TTS:
    """A Qwen3-TTS checkpoint loaded for inference."""

    def __init__(self, folder: Path, device: torch.device, dtype: torch.dtype, is_builtin_tiny: bool) -> None:
        self.folder = folder
        self.device = device
        self.dtype = dtype
        self.is_builtin_tiny = is_builtin_tiny
        self.config = checkpoint.read_json(folder / "config.json")
        self.generation_config = checkpoint.read_json(folder / "generation_config.json")
        self.variant: str = self.config.get("tts_model_type", "")
        if self.variant not in ("base", "custom_voice", "voice_design"):
            raise CheckpointError(
                f"{folder / 'config.json'}: tts_model_type {self.variant!r} is not one of "
                "base, custom_voice, voice_design"
            )
        self.text_ids = TextIds.from_config(self.config)
        tensors = checkpoint.read_safetensors(folder / "model.safetensors")
        parts = ("talker.", "speaker_encoder.") if self.variant == "base" else ("talker.",)
        stray = sorted(name for name in tensors if not name.startswith(parts))
        if stray:
            raise CheckpointError(
                f"{folder / 'model.safetensors'} holds {len(stray)} tensor(s) outside {', '.join(parts)} "
                f"for a {self.variant} checkpoint: {', '.join(stray[:8])}"
            )
        self.talker = talker.load_talker_from(self.config, tensors, device, dtype, where=folder)
        self.speaker_encoder = None
        if self.variant == "base":
            self.speaker_encoder = speaker_encoder.load_speaker_encoder_from(
                self.config, tensors, device, dtype, where=folder
            )
        self.tokenizer = text_tokenizer.TextTokenizer.from_folder(folder)
        codec_dir = folder / "speech_tokenizer"
        self.decoder = codec_decoder.load_codec_decoder(codec_dir, device, dtype)
        self.codec_encoder = (
            codec_encoder.load_codec_encoder(codec_dir, device, dtype) if self.variant == "base" else None
        )

    @classmethod
    def load(cls, model: str | Path, device: str = "cpu", dtype: str = "float32") -> Qwen3TTS:
        """Load a checkpoint folder, a Hugging Face repo id, or `tiny` (the built-in random one)."""
        # The built-in tiny checkpoint is written by engine/tiny.py, which reads the model files'
        # parameter names: resolved here, above them, so that no module imports in a circle.
        folder = builtin_tiny_checkpoint() if str(model) == "tiny" else checkpoint.resolve_model_dir(model)
        return cls(
            folder,
            checkpoint.parse_device(device),
            checkpoint.parse_dtype(dtype),
            is_builtin_tiny=str(model) == "tiny",
        )

    @property
    def model_size(self) -> str:
        return str(self.config.get("tts_model_size", ""))

    def default_layout(self) -> str:
        # The official defaults: non-streaming for CustomVoice/VoiceDesign, dual-track for clones.
        return "dual_track" if self.variant == "base" else "non_streaming"

    def use_kernels(self, kernels: Kernels) -> None:
        """Run every part with `kernels` from now on (the engine's, bound before it captures any
        CUDA graph). Until then each part runs with `Kernels()`: all off."""
        parts = (self.talker, self.decoder, self.codec_encoder, self.speaker_encoder)
        kernels.bind(*(part for part in parts if part is not None))

    def parts(self) -> ModelParts:
        return ModelParts(self.talker, self.tokenizer, self.text_ids, self.variant, self.model_size)

    def voice(
        self,
        speaker: str | None = None,
        language: str = "auto",
        instruct: str | None = None,
        ref_audio: tuple[np.ndarray, int] | None = None,
        ref_text: str | None = None,
        speaker_embedding: np.ndarray | None = None,
    ) -> Voice:
        """Resolve a voice's fields; reference audio becomes an x-vector (and codes, with ref_text)."""
        xvector = ref_codes = None
        if speaker_embedding is not None:
            xvector = torch.as_tensor(np.asarray(speaker_embedding, dtype=np.float32)).reshape(-1)
            if not torch.isfinite(xvector).all():
                raise ValueError("speaker embedding holds non-finite values")
        if ref_audio is not None:
            if self.speaker_encoder is None or self.codec_encoder is None:
                raise ValueError(f"reference audio needs a Base checkpoint; this one is {self.variant}")
            if xvector is not None:
                raise ValueError("give reference audio or a speaker embedding, not both")
            wav = speaker_encoder.prepare_reference_audio(*ref_audio)
            xvector = speaker_encoder.extract_xvector(self.speaker_encoder, wav)
            if ref_text:
                audio = torch.as_tensor(wav, device=self.device, dtype=self.dtype)[None]
                ref_codes = self.codec_encoder.encode(audio)[0]
        elif ref_text:
            raise ValueError("ref_text needs ref_audio: in-context cloning uses the reference audio's codes")
        return Voice(
            speaker=speaker,
            language=language,
            instruct=instruct,
            xvector=xvector,
            ref_codes=ref_codes,
            ref_text=ref_text if ref_codes is not None else None,
        )

    @torch.inference_mode()
    def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        """Generate one utterance with all its text known: one stream through the scheduler, in this
        thread, as one talker sequence (as the official generate does); then one decode."""
        options = StreamOptions(
            layout=request.layout or self.default_layout(),
            greedy=request.greedy,
            seed=request.seed,
            max_frames=request.max_frames or self.generation_config.get("max_new_tokens", 8192) - 1,
            suppress_eos=request.suppress_eos,
        )
        voice = self.voice(
            request.speaker,
            request.language,
            request.instruct,
            request.ref_audio,
            request.ref_text,
            request.speaker_embedding,
        )
        prompt = build_prompt(
            self.talker,
            self.tokenizer,
            self.text_ids,
            request.text,
            voice,
            options.layout,
            self.variant,
            self.model_size,
        )
        assert options.max_frames is not None
        config = EngineConfig(
            max_streams=1,
            kv_length=max(64, prompt.prefill.shape[0] + options.max_frames),
            lookahead_tokens=1,
            segments=SegmentPolicy(sentence_tokens=None, max_tokens=None),
        )
        collector = _CodesCollector()
        scheduler = Scheduler(self.parts(), config, collector, max_ahead_samples=None)
        stream = Stream(0, voice, options, self.tokenizer, wake=lambda: None)
        stream.push_text(request.text)
        stream.end()
        generation = GenerationOptions.from_generation_config(
            self.generation_config, greedy=options.greedy, suppress_eos=options.suppress_eos
        )
        scheduler.submit(stream, generation, lookahead=1)
        while collector.reason is None:
            if not scheduler.step():
                raise RuntimeError("synthesis stalled: the scheduler has nothing to do before the end")
        if collector.error is not None:
            raise collector.error
        codes = torch.from_numpy(
            np.stack(collector.codes) if collector.codes else np.zeros((0, 16), np.int64)
        )
        state = self.decoder.new_state(1, self.device, self.dtype)
        if voice.ref_codes is not None:
            # The official decode runs over reference + new codes and cuts the reference part;
            # warming the causal decoder on the reference codes gives the same samples.
            self.decoder.decode_step(voice.ref_codes[None].to(self.device), state)
        audio = (
            self.decoder.decode_step(codes[None].to(self.device), state)[0] if len(codes) else torch.zeros(0)
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

    def frames(self, streams: list[Stream], codes: np.ndarray, fed: list[TrackEntry]) -> None:
        self.codes.extend(codes)

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
