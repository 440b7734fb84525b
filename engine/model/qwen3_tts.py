"""Qwen3TTS: one Qwen3-TTS checkpoint loaded for inference (talker, text tokenizer, codec decoder and,
for Base checkpoints, the codec encoder and speaker encoder), its voices resolved to what a prompt
needs, and `ModelParts`: what a talker backend is built from. Offline synthesis over it is
engine/runtime/synthesis.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import (
    checkpoint,
    codec_decoder,
    codec_encoder,
    speaker_encoder,
    talker,
    text_tokenizer,
    weights,
)
from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.model.prompt import TextIds
from voicewire.engine.model.random_checkpoint import builtin_tiny_checkpoint
from voicewire.engine.voice import Voice


@dataclass(frozen=True)
class ModelParts:
    """What a talker backend needs of a loaded checkpoint."""

    talker: talker.Talker
    tokenizer: text_tokenizer.TextTokenizer
    text_ids: TextIds
    variant: str
    model_size: str


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
        tensors = weights.read_safetensors(folder / "model.safetensors")
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
        # The built-in tiny checkpoint is written by engine/model/random_checkpoint.py, which reads the model files'
        # parameter names: resolved here, above them, so that no module imports in a circle.
        folder = builtin_tiny_checkpoint() if str(model) == "tiny" else checkpoint.resolve_model_dir(model)
        return cls(
            folder,
            weights.parse_device(device),
            weights.parse_dtype(dtype),
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
            xvector = np.asarray(speaker_embedding, dtype=np.float32).reshape(-1)
            if not np.isfinite(xvector).all():
                raise ValueError("speaker embedding holds non-finite values")
        if ref_audio is not None:
            if self.speaker_encoder is None or self.codec_encoder is None:
                raise ValueError(f"reference audio needs a Base checkpoint; this one is {self.variant}")
            if xvector is not None:
                raise ValueError("give reference audio or a speaker embedding, not both")
            wav = speaker_encoder.prepare_reference_audio(*ref_audio)
            xvector = speaker_encoder.extract_xvector(self.speaker_encoder, wav).cpu().numpy()
            if ref_text:
                audio = torch.as_tensor(wav, device=self.device, dtype=self.dtype)[None]
                ref_codes = self.codec_encoder.encode(audio)[0].cpu().numpy()
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
