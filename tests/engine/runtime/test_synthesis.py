"""End to end against the official package: same checkpoint, same codes, same audio."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.synthesis import SynthesisRequest, synthesize

FRAMES = 40
TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun."
REF_TEXT = "This is the reference speaker talking."

# name -> (variant, job fields for the oracle); layout as the official non_streaming_mode flag.
CASES: dict[str, tuple[str, dict]] = {
    "cv_speaker_ns": (
        "custom_voice",
        {"speaker": "vivian", "language": "english", "non_streaming_mode": True},
    ),
    "cv_speaker_dt": (
        "custom_voice",
        {"speaker": "serena", "language": "english", "non_streaming_mode": False},
    ),
    "cv_dialect_dt": (
        "custom_voice",
        {"speaker": "eric", "language": "chinese", "non_streaming_mode": False},
    ),
    "cv_auto_ns": ("custom_voice", {"speaker": "ryan", "language": "auto", "non_streaming_mode": True}),
    "vd_ns": (
        "voice_design",
        {"instruct": "A warm, low voice.", "language": "english", "non_streaming_mode": True},
    ),
    "vd_dt": (
        "voice_design",
        {"instruct": "Bright and fast.", "language": "auto", "non_streaming_mode": False},
    ),
    "base_xvec_dt": ("base", {"x_vector_only": True, "language": "english", "non_streaming_mode": False}),
    "base_xvec_ns": ("base", {"x_vector_only": True, "language": "german", "non_streaming_mode": True}),
    "base_icl_dt": ("base", {"ref_text": REF_TEXT, "language": "english", "non_streaming_mode": False}),
    "base_icl_ns": ("base", {"ref_text": REF_TEXT, "language": "auto", "non_streaming_mode": True}),
}
KINDS = {"custom_voice": "custom_voice", "voice_design": "voice_design", "base": "voice_clone"}


def _reference_wav(path: Path) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(5)
    t = np.arange(int(24000 * 2.3)) / 24000
    audio = (0.3 * np.sin(2 * np.pi * (150 + 200 * t) * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    sf.write(path, audio, 24000, subtype="FLOAT")
    return audio, 24000


@pytest.fixture(scope="module")
def official(oracle, tiny_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("e2e")
    _reference_wav(work / "ref.wav")
    jobs = []
    for name, (variant, fields) in CASES.items():
        job = {"name": name, "model": str(tiny_checkpoints[variant]), "kind": KINDS[variant], "text": TEXT}
        job.update(fields, max_new_tokens=FRAMES + 1, suppress_eos=True)
        if variant == "base":
            job["ref_audio"] = str(work / "ref.wav")
        jobs.append(job)
    (work / "jobs.json").write_text(json.dumps(jobs))
    oracle("synthesize.py", str(work / "jobs.json"), str(work))
    return {"work": work, "results": {name: dict(np.load(work / f"{name}.npz")) for name in CASES}}


@pytest.fixture(scope="module")
def models(tiny_models) -> dict[str, Qwen3TTS]:
    return tiny_models


@pytest.mark.parametrize("name", list(CASES))
def test_codes_and_audio_match_official(name: str, official: dict, models: dict[str, Qwen3TTS]) -> None:
    variant, fields = CASES[name]
    ref_audio = sf.read(official["work"] / "ref.wav", dtype="float32") if variant == "base" else None
    request = SynthesisRequest(
        text=TEXT,
        speaker=fields.get("speaker"),
        language=fields["language"],
        instruct=fields.get("instruct"),
        ref_audio=ref_audio,
        ref_text=fields.get("ref_text"),
        layout="non_streaming" if fields["non_streaming_mode"] else "dual_track",
        greedy=True,
        max_frames=FRAMES,
        suppress_eos=True,
    )
    ours = synthesize(models[variant], request)
    theirs = official["results"][name]
    assert theirs["codes"].shape == (FRAMES, 16)
    np.testing.assert_array_equal(ours.codes, theirs["codes"])
    assert ours.audio.shape == theirs["wav"].shape == (FRAMES * 1920,)
    assert np.abs(ours.audio - theirs["wav"]).max() < 1e-4
    assert float(np.sqrt(np.mean(ours.audio**2))) > 1e-2  # not near silent


def test_text_changes_the_codes(models: dict[str, Qwen3TTS]) -> None:
    model = models["custom_voice"]

    def codes(text: str) -> np.ndarray:
        request = SynthesisRequest(text=text, speaker="vivian", greedy=True, max_frames=12, suppress_eos=True)
        return synthesize(model, request).codes

    assert not np.array_equal(codes("Good morning, everyone."), codes("Completely different words here!"))


def test_seeded_sampling_is_reproducible(models: dict[str, Qwen3TTS]) -> None:
    model = models["voice_design"]
    request = SynthesisRequest(text="Seeds make it repeatable.", instruct="Calm.", seed=11, max_frames=10)
    first, second = synthesize(model, request), synthesize(model, request)
    np.testing.assert_array_equal(first.codes, second.codes)
    other = synthesize(
        model, SynthesisRequest(text="Seeds make it repeatable.", instruct="Calm.", seed=12, max_frames=10)
    )
    assert not np.array_equal(first.codes, other.codes)


def test_raw_speaker_embedding_equals_cloning_from_audio(official: dict, models: dict[str, Qwen3TTS]) -> None:
    model = models["base"]
    audio = sf.read(official["work"] / "ref.wav", dtype="float32")
    xvector = model.voice(ref_audio=audio).xvector
    common = dict(text=TEXT, language="english", greedy=True, max_frames=12, suppress_eos=True)
    from_audio = synthesize(model, SynthesisRequest(ref_audio=audio, **common))
    from_vector = synthesize(model, SynthesisRequest(speaker_embedding=xvector, **common))
    np.testing.assert_array_equal(from_audio.codes, from_vector.codes)
    with pytest.raises(ValueError, match="must have 64 values"):
        synthesize(model, SynthesisRequest(speaker_embedding=np.zeros(10, np.float32), **common))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_loads_and_runs(tiny_checkpoints, dtype: str) -> None:
    model = Qwen3TTS.load(tiny_checkpoints["custom_voice"], dtype=dtype)
    assert model.talker.codec_head.weight.dtype == getattr(torch, dtype)
    result = synthesize(
        model, SynthesisRequest(text="Half precision.", speaker="ryan", greedy=True, max_frames=4)
    )
    assert result.audio.dtype == np.float32 and np.isfinite(result.audio).all()
    assert result.audio.shape == (result.codes.shape[0] * 1920,)


def test_mismatched_checkpoint_is_a_readable_error(tiny_checkpoints, tmp_path: Path) -> None:
    import shutil

    from voicewire.engine.model.checkpoint import CheckpointError
    from voicewire.engine.model.weights import read_safetensors, save_tensors

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoints["voice_design"], broken)
    tensors = read_safetensors(broken / "model.safetensors")
    tensors["talker.codec_head.weight"] = tensors["talker.codec_head.weight"][:, :32].contiguous()
    del tensors["talker.model.norm.weight"]
    save_tensors(broken / "model.safetensors", tensors)
    with pytest.raises(CheckpointError) as info:
        Qwen3TTS.load(broken)
    message = str(info.value)
    assert (
        "model.norm.weight" in message
        and "codec_head.weight: checkpoint (3072, 32) vs model (3072, 64)" in message
    )
    tensors = read_safetensors(tiny_checkpoints["voice_design"] / "model.safetensors")
    tensors["speaker_encoder.fc.weight"] = torch.zeros(2, 2)
    save_tensors(broken / "model.safetensors", tensors)
    with pytest.raises(
        CheckpointError, match=r"1 tensor\(s\) outside talker\. for a voice_design checkpoint"
    ):
        Qwen3TTS.load(broken)
    (broken / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"speech_tokenizer/model\.safetensors"):
        Qwen3TTS.load(broken)
