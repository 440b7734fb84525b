"""Talker prompts: the prefill rows and the text track, for every variant and both layouts.

A prefill row is a text-track row plus a codec-track row, summed. A prompt has two parts:
- the voice prefix (instruct turn, role, codec control tags, speaker): it does not depend on the
  text, so a stream builds it once and keeps its KV across restarts;
- the segment rows, built from the segment's text sequence `seq`: the reference text ids (in-context
  cloning), the text ids, and tts_eos once the text is complete. The part of `seq` not in the
  prefill is the text track, fed one id per generated frame (then tts_pad), so text can be
  appended while audio is being made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from voicewire.engine.config import LAYOUTS
from voicewire.engine.model.talker import Talker
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.voice import Voice

VARIANTS = ("base", "custom_voice", "voice_design")


@dataclass(frozen=True)
class TextIds:
    """The text-side special ids from config.json."""

    tts_pad: int
    tts_bos: int
    tts_eos: int

    @classmethod
    def from_config(cls, config: dict) -> TextIds:
        return cls(config["tts_pad_token_id"], config["tts_bos_token_id"], config["tts_eos_token_id"])


# Entries of a prompt row besides plain ids (>= 0).
NO_CODEC = -1  # a text-only row (text entries are never negative)
XVECTOR = -2  # the voice's speaker embedding
REF_FRAME = -3  # REF_FRAME - j: the summed embeddings of reference frame j (in-context cloning)


@dataclass
class Rows:
    """Prompt rows, symbolically: row r is the text-track row of `text[r]` plus the codec-track row
    of `codec[r]`. Plain ids travel to other processes (the vLLM worker) and are embedded there;
    `embed_rows` turns them into vectors."""

    text: list[int]
    codec: list[int]

    def __post_init__(self) -> None:
        if len(self.text) != len(self.codec):
            raise ValueError(f"{len(self.text)} text entries for {len(self.codec)} codec entries")

    def __len__(self) -> int:
        return len(self.text)

    def __add__(self, other: Rows) -> Rows:
        return Rows(self.text + other.text, self.codec + other.codec)


def text_only(ids: list[int]) -> Rows:
    return Rows(list(ids), [NO_CODEC] * len(ids))


@dataclass
class Prompt:
    prefill: Tensor  # [L, H]
    text_track: list[int]  # text ids fed one per frame after the prefill; tts_pad when exhausted


@dataclass
class VoicePrompt:
    """The text-independent part of a stream's prompt, built once per stream."""

    prefix: Rows  # instruct turn, role rows, codec control rows with tts_pad/tts_bos
    codec_bos: int  # goes with the first text row (dual track)
    codec_pad: int
    text_pad: int
    ref_ids: list[int]  # in-context cloning: reference text ids, which open every segment's seq
    ref_frames: int  # in-context cloning: reference frames (their rows follow a codec bos); else 0
    xvector: Tensor | None  # [H], for the XVECTOR row
    ref_codes: Tensor | None  # [ref_frames, 16], for the REF_FRAME rows

    @property
    def ref_codec(self) -> list[int]:
        """The codec entries of an in-context segment head: codec bos, then each reference frame."""
        return [self.codec_bos, *(REF_FRAME - j for j in range(self.ref_frames))]


def embed_rows(talker: Talker, rows: Rows, xvector: Tensor | None, ref_codes: Tensor | None) -> Tensor:
    """Rows -> [len, H]: text rows through the text projection, plus codec, x-vector or frame rows.

    Which rows get what is decided on the host from the ids, and ids go over without a wait: on
    CUDA this queues work and never syncs (a scheduler round embeds many prompts)."""
    device = talker.codec_head.weight.device
    text, codec = np.asarray(rows.text, dtype=np.int64), np.asarray(rows.codec, dtype=np.int64)
    out = torch.zeros(
        len(rows), talker.cfg.decoder.hidden_size, device=device, dtype=talker.codec_head.weight.dtype
    )

    has_text, plain, spk, frames = text >= 0, codec >= 0, codec == XVECTOR, codec <= REF_FRAME
    if has_text.any():
        out[_on(np.flatnonzero(has_text), device)] = talker.embed_text(_on(text[has_text], device))
    if plain.any():
        out[_on(np.flatnonzero(plain), device)] += talker.embed_codec(_on(codec[plain], device))
    if spk.any():
        if xvector is None:
            raise ValueError("the prompt has a speaker-embedding row but the voice has none")
        out[_on(np.flatnonzero(spk), device)] += xvector.to(device=device, dtype=out.dtype, non_blocking=True)
    if frames.any():
        if ref_codes is None:
            raise ValueError("the prompt has reference-frame rows but the voice has no reference codes")
        ref = ref_codes.to(device, non_blocking=True)[_on(REF_FRAME - codec[frames], device)]
        out[_on(np.flatnonzero(frames), device)] += talker.embed_frame(ref)
    return out


def _on(array: np.ndarray, device: torch.device) -> Tensor:
    """A host array on `device`, queued without waiting for the device (a pageable copy is staged
    before the call returns, so the array may go at once)."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)


def supported_languages(talker: Talker) -> list[str]:
    return ["auto", *sorted(k for k in talker.cfg.languages if "dialect" not in k)]


def check_voice(talker: Talker, voice: Voice, variant: str, model_size: str) -> None:
    cfg = talker.cfg
    if voice.language.lower() not in supported_languages(talker):
        raise ValueError(
            f"unknown language {voice.language!r}; allowed: {', '.join(supported_languages(talker))}"
        )
    if variant == "custom_voice":
        if not voice.speaker:
            raise ValueError(
                f"this CustomVoice checkpoint needs a speaker; allowed: {', '.join(sorted(cfg.speakers))}"
            )
        if voice.speaker.lower() not in cfg.speakers:
            raise ValueError(f"unknown speaker {voice.speaker!r}; allowed: {', '.join(sorted(cfg.speakers))}")
        if voice.instruct and model_size != "1b7":
            raise ValueError("instruct needs a 1.7B CustomVoice checkpoint; this one is 0.6B")
    elif voice.speaker:
        raise ValueError(
            f"speaker {voice.speaker!r} given, but only CustomVoice checkpoints have named speakers"
        )
    if variant == "voice_design" and not voice.instruct:
        raise ValueError("a VoiceDesign checkpoint needs an instruct text describing the voice")
    if variant == "base":
        if voice.instruct:
            raise ValueError(
                "instruct is not supported by Base checkpoints (use VoiceDesign or CustomVoice 1.7B)"
            )
        if voice.xvector is None:
            raise ValueError("a Base checkpoint clones a voice: give reference audio or a speaker embedding")
        hidden = cfg.decoder.hidden_size
        if voice.xvector.shape != (hidden,):
            raise ValueError(
                f"speaker embedding must have {hidden} values, got shape {tuple(voice.xvector.shape)}"
            )
        if (voice.ref_codes is None) != (voice.ref_text is None):
            raise ValueError(
                "in-context cloning needs both the reference codes (from audio) and the reference text"
            )
    elif voice.xvector is not None or voice.ref_codes is not None:
        raise ValueError(f"reference audio and speaker embeddings are for Base checkpoints, not {variant}")


def _language_id(talker: Talker, voice: Voice) -> int | None:
    cfg = talker.cfg
    language = voice.language.lower()
    language_id = None if language == "auto" else cfg.languages[language]
    if voice.speaker and language in ("chinese", "auto"):
        dialect = cfg.speaker_dialects.get(voice.speaker.lower(), False)
        if dialect:
            language_id = cfg.languages[dialect]
    return language_id


def build_voice_prompt(
    talker: Talker, tokenizer: TextTokenizer, text_ids: TextIds, voice: Voice, variant: str, model_size: str
) -> VoicePrompt:
    """Validate `voice` for this checkpoint and build its prompt prefix."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    check_voice(talker, voice, variant, model_size)
    cfg = talker.cfg
    language_id = _language_id(talker, voice)
    codec = (
        [cfg.codec_nothink_id, cfg.codec_think_bos_id, cfg.codec_think_eos_id]
        if language_id is None
        else [cfg.codec_think_id, cfg.codec_think_bos_id, language_id, cfg.codec_think_eos_id]
    )
    if voice.speaker:
        codec.append(cfg.speakers[voice.speaker.lower()])
    elif voice.xvector is not None:
        codec.append(XVECTOR)
    codec.append(cfg.codec_pad_id)  # codec bos follows, with the first text row
    n = len(codec) + 1

    prefix = Rows([], [])
    if voice.instruct:
        prefix += text_only(tokenizer.encode(f"<|im_start|>user\n{voice.instruct}<|im_end|>\n"))
    prefix += text_only(tokenizer.encode("<|im_start|>assistant\n"))
    prefix += Rows([text_ids.tts_pad] * (n - 2) + [text_ids.tts_bos], codec)

    ref_ids: list[int] = []
    if voice.ref_codes is not None:
        ref_ids = tokenizer.encode(f"<|im_start|>assistant\n{voice.ref_text}<|im_end|>\n")[3:-2]
    return VoicePrompt(
        prefix=prefix,
        codec_bos=cfg.codec_bos_id,
        codec_pad=cfg.codec_pad_id,
        text_pad=text_ids.tts_pad,
        ref_ids=ref_ids,
        ref_frames=0 if voice.ref_codes is None else int(voice.ref_codes.shape[0]),
        # Copies (a few KB): the voice's arrays may be read-only views of a stored voice's bytes.
        xvector=None if voice.xvector is None else torch.tensor(voice.xvector),
        ref_codes=None if voice.ref_codes is None else torch.tensor(voice.ref_codes),
    )


def segment_can_start(voice: VoicePrompt, seq_len: int, complete: bool, layout: str) -> bool:
    """Whether a segment whose seq holds `seq_len` ids has enough text for its prefill."""
    if layout == "non_streaming":
        return complete
    need = 1 if not voice.ref_frames else voice.ref_frames + 1
    return complete or seq_len >= need


def segment_rows(voice: VoicePrompt, seq: list[int], layout: str) -> tuple[Rows, int]:
    """The prefill rows that follow the voice prefix for a segment, and how many ids of `seq` they hold.

    `seq` is the segment's text sequence (ends with tts_eos when complete); ids after the first
    `k` are its text track."""
    if layout == "non_streaming":
        last = [voice.codec_bos] if not voice.ref_frames else voice.ref_codec
        text = Rows(list(seq), [voice.codec_pad] * len(seq))
        return text + Rows([voice.text_pad] * len(last), last), len(seq)
    if not voice.ref_frames:
        return Rows([seq[0]], [voice.codec_bos]), 1
    head = voice.ref_codec
    k = min(len(head), len(seq))
    return Rows([*seq[:k], *[voice.text_pad] * (len(head) - k)], head), k


def build_prompt(
    talker: Talker,
    tokenizer: TextTokenizer,
    text_ids: TextIds,
    text: str,
    voice: Voice,
    layout: str,
    variant: str,
    model_size: str,
) -> Prompt:
    """The talker prompt for all of `text` in `voice`, laid out as the official generate does."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; allowed: {', '.join(LAYOUTS)}")
    prefix = build_voice_prompt(talker, tokenizer, text_ids, voice, variant, model_size)
    body = tokenizer.encode(text)
    if not body:
        raise ValueError("text is empty")
    seq = [*prefix.ref_ids, *body, text_ids.tts_eos]
    rows, k = segment_rows(prefix, seq, layout)
    prefill = embed_rows(talker, prefix.prefix + rows, prefix.xvector, prefix.ref_codes)
    return Prompt(prefill=prefill, text_track=seq[k:])
