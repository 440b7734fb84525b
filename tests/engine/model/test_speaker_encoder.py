from pathlib import Path

import numpy as np
import pytest
import torch

from voicewire.engine.model.checkpoint import CheckpointError, read_json
from voicewire.engine.model.mel import log_mel, mel_filterbank
from voicewire.engine.model.speaker_encoder import (
    extract_xvector,
    load_speaker_encoder,
    load_speaker_encoder_from,
    prepare_reference_audio,
)
from voicewire.engine.model.weights import read_safetensors


def _signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    t = np.arange(24000 * 2) / 24000
    return {
        "chirp": (0.4 * np.sin(2 * np.pi * (100 + 900 * t) * t)).astype(np.float32),
        "noise": (0.2 * rng.standard_normal(30011)).astype(np.float32),
        "tones": (0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 3300 * t))[:40000].astype(
            np.float32
        ),
    }


@pytest.fixture(scope="module")
def official(oracle, tiny_checkpoints, tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    work = tmp_path_factory.mktemp("speaker")
    np.savez(work / "wavs.npz", **_signals())
    oracle("speaker.py", str(tiny_checkpoints["base"]), str(work / "wavs.npz"), str(work / "out.npz"))
    return dict(np.load(work / "out.npz"))


def test_filterbank_equals_librosa(official: dict[str, np.ndarray]) -> None:
    np.testing.assert_allclose(mel_filterbank().numpy(), official["filterbank"], atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("name", list(_signals()))
def test_mel_and_xvector_match_official(name: str, official: dict[str, np.ndarray], tiny_checkpoints) -> None:
    audio = _signals()[name]
    mel = log_mel(torch.from_numpy(audio)[None])[0].numpy()
    assert mel.shape == official[f"mel_{name}"].shape
    assert np.abs(mel - official[f"mel_{name}"]).max() < 1e-5
    encoder = load_speaker_encoder(tiny_checkpoints["base"], "cpu", torch.float32)
    xvec = extract_xvector(encoder, audio).numpy()
    assert xvec.shape == (64,)
    assert np.abs(xvec - official[f"xvec_{name}"]).max() < 1e-4


def test_xvectors_depend_on_the_audio(official: dict[str, np.ndarray]) -> None:
    a, b = official["xvec_chirp"], official["xvec_noise"]
    assert np.linalg.norm(a - b) > 0.1 * np.linalg.norm(a)


def test_reference_audio_is_made_mono_24k() -> None:
    stereo = np.stack([np.ones(48000, np.float32) * 0.5, np.zeros(48000, np.float32)], axis=1)
    mono = prepare_reference_audio(stereo, 48000)
    assert mono.dtype == np.float32 and mono.shape == (24000,)
    assert abs(float(mono[12000]) - 0.25) < 1e-3
    same = _signals()["chirp"]
    np.testing.assert_array_equal(prepare_reference_audio(same, 24000), same)
    with pytest.raises(ValueError, match="too short"):
        prepare_reference_audio(np.zeros(100, np.float32), 24000)


def test_loader_names_missing_weights(tiny_checkpoints) -> None:
    folder: Path = tiny_checkpoints["base"]
    tensors = read_safetensors(folder / "model.safetensors")
    del tensors["speaker_encoder.fc.weight"]
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): fc\.weight"):
        load_speaker_encoder_from(
            read_json(folder / "config.json"), tensors, torch.device("cpu"), torch.float32, folder
        )
