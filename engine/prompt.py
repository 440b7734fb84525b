"""Talker prompts: the prefill rows and the text track, for every variant and both layouts.

A prefill row is a text-track row plus a codec-track row, summed. The text track left after the
prefill stays as token ids, consumed one per generated frame (then tts_pad), so a later stage
can append text as it arrives.
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


def supported_languages(talker: Talker) -> list[str]:
    return ["auto", *sorted(k for k in talker.cfg.languages if "dialect" not in k)]


def _check_voice(talker: Talker, voice: Voice, variant: str, model_size: str) -> None:
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
    """The talker prompt for `text` in `voice`, laid out as the official generate does."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; allowed: {', '.join(LAYOUTS)}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    _check_voice(talker, voice, variant, model_size)
    cfg = talker.cfg
    device = talker.codec_head.weight.device

    def ids(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    def text_rows(values: list[int]) -> Tensor:
        return talker.embed_text(ids(values))

    def codec_rows(values: list[int]) -> Tensor:
        return talker.embed_codec(ids(values))

    # The template's fixed slices: 3 role tokens, the text, then <|im_end|>\n<|im_start|>assistant\n.
    full = tokenizer.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
    role, body = full[:3], full[3:-5]
    if not body:
        raise ValueError("text is empty")
    pad, bos, eos = text_ids.tts_pad, text_ids.tts_bos, text_ids.tts_eos

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
    codec.append(codec_rows([cfg.codec_pad_id, cfg.codec_bos_id]))
    codec_track = torch.cat(codec)  # [n, H]; its last row (codec bos) goes with the first text row
    n = codec_track.shape[0]

    rows = []
    if voice.instruct:
        rows.append(text_rows(tokenizer.encode(f"<|im_start|>user\n{voice.instruct}<|im_end|>\n")))
    rows.append(text_rows(role))
    rows.append(text_rows([pad] * (n - 2) + [bos]) + codec_track[:-1])

    if voice.ref_codes is not None:
        ref = tokenizer.encode(f"<|im_start|>assistant\n{voice.ref_text}<|im_end|>\n")[3:-2]
        all_text = ref + body + [eos]
        frames = voice.ref_codes.to(device)
        ref_codec = torch.cat((codec_rows([cfg.codec_bos_id]), talker.embed_frame(frames)))
        if layout == "non_streaming":
            rows.append(text_rows(all_text) + codec_rows([cfg.codec_pad_id] * len(all_text)))
            rows.append(ref_codec + text_rows([pad]))
            track: list[int] = []
        else:
            m = ref_codec.shape[0]
            head = (all_text + [pad] * m)[:m]
            rows.append(text_rows(head) + ref_codec)
            track = all_text[m:]
    elif layout == "non_streaming":
        rows.append(text_rows([*body, eos]) + codec_rows([cfg.codec_pad_id] * (len(body) + 1)))
        rows.append(text_rows([pad]) + codec_rows([cfg.codec_bos_id]))
        track = []
    else:
        rows.append(text_rows(body[:1]) + codec_track[-1:])
        track = [*body[1:], eos]
    return Prompt(prefill=torch.cat(rows), text_track=track)
