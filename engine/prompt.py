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

import torch
from torch import Tensor

from voicewire.engine.talker import Talker
from voicewire.engine.text_tokenizer import TextTokenizer

LAYOUTS = ("non_streaming", "dual_track")
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


@dataclass
class Voice:
    """Who speaks and how. Which fields apply depends on the checkpoint's variant."""

    speaker: str | None = None  # CustomVoice
    language: str = "auto"
    instruct: str | None = None  # VoiceDesign; CustomVoice on 1.7B
    xvector: Tensor | None = None  # Base: [H] speaker embedding
    ref_codes: Tensor | None = None  # Base in-context: [T, 16] codes of the reference audio
    ref_text: str | None = None  # Base in-context: transcript of the reference audio


@dataclass
class Prompt:
    prefill: Tensor  # [L, H]
    text_track: list[int]  # text ids fed one per frame after the prefill; tts_pad when exhausted


@dataclass
class VoicePrompt:
    """The text-independent part of a stream's prompt, built once per stream."""

    prefix: Tensor  # [L0, H]: instruct turn, role rows, codec control rows with tts_pad/tts_bos
    codec_bos: Tensor  # [1, H]: goes with the first text row (dual track)
    codec_pad: Tensor  # [1, H]
    text_pad: Tensor  # [1, H]
    ref_ids: list[int]  # in-context cloning: reference text ids, which open every segment's seq
    ref_codec: Tensor | None  # in-context cloning: [m, H] codec bos + reference frame embeddings


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
    device = talker.codec_head.weight.device

    def text_rows(values: list[int]) -> Tensor:
        return talker.embed_text(torch.tensor(values, dtype=torch.long, device=device))

    def codec_rows(values: list[int]) -> Tensor:
        return talker.embed_codec(torch.tensor(values, dtype=torch.long, device=device))

    language_id = _language_id(talker, voice)
    tags = (
        [cfg.codec_nothink_id, cfg.codec_think_bos_id, cfg.codec_think_eos_id]
        if language_id is None
        else [cfg.codec_think_id, cfg.codec_think_bos_id, language_id, cfg.codec_think_eos_id]
    )
    codec = [codec_rows(tags)]
    if voice.speaker:
        codec.append(codec_rows([cfg.speakers[voice.speaker.lower()]]))
    elif voice.xvector is not None:
        codec.append(voice.xvector.to(device=device, dtype=codec[0].dtype)[None])
    codec.append(codec_rows([cfg.codec_pad_id]))
    codec_track = torch.cat(codec)  # [n, H]; codec bos follows, with the first text row
    n = codec_track.shape[0] + 1

    rows = []
    if voice.instruct:
        rows.append(text_rows(tokenizer.encode(f"<|im_start|>user\n{voice.instruct}<|im_end|>\n")))
    rows.append(text_rows(tokenizer.encode("<|im_start|>assistant\n")))
    rows.append(text_rows([text_ids.tts_pad] * (n - 2) + [text_ids.tts_bos]) + codec_track)

    ref_ids: list[int] = []
    ref_codec = None
    if voice.ref_codes is not None:
        ref_ids = tokenizer.encode(f"<|im_start|>assistant\n{voice.ref_text}<|im_end|>\n")[3:-2]
        frames = voice.ref_codes.to(device)
        ref_codec = torch.cat((codec_rows([cfg.codec_bos_id]), talker.embed_frame(frames)))
    return VoicePrompt(
        prefix=torch.cat(rows),
        codec_bos=codec_rows([cfg.codec_bos_id]),
        codec_pad=codec_rows([cfg.codec_pad_id]),
        text_pad=text_rows([text_ids.tts_pad]),
        ref_ids=ref_ids,
        ref_codec=ref_codec,
    )


def segment_can_start(voice: VoicePrompt, seq_len: int, complete: bool, layout: str) -> bool:
    """Whether a segment whose seq holds `seq_len` ids has enough text for its prefill."""
    if layout == "non_streaming":
        return complete
    need = 1 if voice.ref_codec is None else voice.ref_codec.shape[0]
    return complete or seq_len >= need


def segment_rows(talker: Talker, voice: VoicePrompt, seq: list[int], layout: str) -> tuple[Tensor, int]:
    """The prefill rows that follow the voice prefix for a segment, and how many ids of `seq` they hold.

    `seq` is the segment's text sequence (ends with tts_eos when complete); ids after the first
    `k` are its text track."""
    device = talker.codec_head.weight.device
    texts = talker.embed_text(torch.tensor(seq, dtype=torch.long, device=device))
    if layout == "non_streaming":
        rows = [texts + voice.codec_pad.expand(len(seq), -1)]
        last = voice.codec_bos if voice.ref_codec is None else voice.ref_codec
        rows.append(last + voice.text_pad)
        return torch.cat(rows), len(seq)
    if voice.ref_codec is None:
        return texts[:1] + voice.codec_bos, 1
    m = voice.ref_codec.shape[0]
    k = min(m, len(seq))
    head = torch.cat((texts[:k], voice.text_pad.expand(m - k, -1)))
    return head + voice.ref_codec, k


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
    rows, k = segment_rows(talker, prefix, seq, layout)
    return Prompt(prefill=torch.cat((prefix.prefix, rows)), text_track=seq[k:])
