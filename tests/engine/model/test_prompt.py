import numpy as np
import pytest
import torch

from voicewire.engine.model.prompt import build_prompt
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.voice import Voice


@pytest.fixture(scope="module")
def models(tiny_models) -> dict[str, Qwen3TTS]:
    return tiny_models


def _build(model: Qwen3TTS, voice: Voice, layout: str = "dual_track", text: str = "Hello there."):
    return build_prompt(
        model.talker, model.tokenizer, model.text_ids, text, voice, layout, model.variant, "0b6"
    )


def test_dual_track_keeps_the_text_as_a_track(models: dict[str, Qwen3TTS]) -> None:
    model = models["custom_voice"]
    body = model.tokenizer.encode("Hello there, friend.")
    dual = _build(model, Voice(speaker="vivian", language="english"), text="Hello there, friend.")
    flat = _build(model, Voice(speaker="vivian", language="english"), "non_streaming", "Hello there, friend.")
    # role 3 + tags (think, think_bos, lang, think_eos) + speaker + pad = 9 rows, then text 1 + codec bos.
    assert dual.prefill.shape == (3 + 6 + 1, 64)
    assert dual.text_track == [*body[1:], model.text_ids.tts_eos]
    assert flat.prefill.shape == (3 + 6 + len(body) + 1 + 1, 64)
    assert flat.text_track == []


def test_auto_language_drops_the_language_tag(models: dict[str, Qwen3TTS]) -> None:
    model = models["custom_voice"]
    with_lang = _build(model, Voice(speaker="vivian", language="english"))
    auto = _build(model, Voice(speaker="vivian", language="auto"))
    assert auto.prefill.shape[0] == with_lang.prefill.shape[0] - 1


def test_dialect_speaker_swaps_the_language(models: dict[str, Qwen3TTS]) -> None:
    model = models["custom_voice"]
    talker, pad = model.talker, torch.tensor(model.text_ids.tts_pad)
    # Rows 3.. are tts_pad + [think, think_bos, language, ...]; row 5 carries the language tag.
    for speaker, language, tag in (("eric", "chinese", "sichuan_dialect"), ("vivian", "chinese", "chinese")):
        prefill = _build(model, Voice(speaker=speaker, language=language)).prefill
        expected = talker.embed_text(pad) + talker.embed_codec(torch.tensor(talker.cfg.languages[tag]))
        assert torch.allclose(prefill[5], expected, atol=1e-6)


@pytest.mark.parametrize(
    ("variant", "voice", "message"),
    [
        ("custom_voice", Voice(speaker="nobody"), "allowed: aiden, dylan, eric, ryan, serena, vivian"),
        ("custom_voice", Voice(), "needs a speaker; allowed: aiden"),
        ("custom_voice", Voice(speaker="vivian", language="klingon"), "allowed: auto, chinese, english"),
        ("custom_voice", Voice(speaker="vivian", instruct="Happy."), "needs a 1.7B CustomVoice"),
        ("voice_design", Voice(), "needs an instruct"),
        ("voice_design", Voice(instruct="Calm.", speaker="vivian"), "only CustomVoice checkpoints"),
        ("base", Voice(), "give reference audio or a speaker embedding"),
        ("base", Voice(xvector=np.zeros(7)), "must have 64 values, got shape (7,)"),
        ("base", Voice(xvector=np.zeros(64), ref_text="Hi."), "needs both the reference codes"),
    ],
)
def test_invalid_voices_list_what_is_allowed(
    models: dict[str, Qwen3TTS], variant: str, voice: Voice, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _build(models[variant], voice)


def test_unknown_layout_is_rejected(models: dict[str, Qwen3TTS]) -> None:
    with pytest.raises(ValueError, match="allowed: non_streaming, dual_track"):
        _build(models["custom_voice"], Voice(speaker="vivian"), layout="interleaved")
