import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from voicewire.engine.model.checkpoint import CheckpointError, write_json
from voicewire.engine.model.codec_encoder import (
    CodecEncoder,
    CodecEncoderConfig,
    load_codec_encoder,
    random_init_,
)
from voicewire.engine.model.random_checkpoint import codec_encoder_config
from voicewire.engine.model.weights import read_safetensors, save_tensors

SR = 24000
SAMPLES = 1920


def _signals() -> dict[str, np.ndarray]:
    t = np.arange(3 * SR) / SR
    # 36967 samples: 39 conv frames (odd), so the last code frame's downsample pads by repeating.
    n_odd = 36967
    rng = np.random.default_rng(0)
    # 12 s: 300 conv frames, past Mimi's configured sliding_window of 250 (not applied by the
    # official encode, whose transformer attends causally over everything).
    long = np.arange(12 * SR) / SR
    return {
        "chirp": (0.5 * np.sin(2 * np.pi * (100 * t + 1000 * t**2))).astype(np.float32),
        "long": (0.3 * rng.standard_normal(12 * SR) * np.sin(2 * np.pi * 0.7 * long) ** 2).astype(np.float32),
        "short": (0.3 * rng.standard_normal(1000)).astype(np.float32),
        "noise": (0.3 * rng.standard_normal(2 * SR)).astype(np.float32),
        "odd": (0.4 * np.sin(2 * np.pi * 220 * np.arange(n_odd) / SR) * np.linspace(0, 1, n_odd)).astype(
            np.float32
        ),
    }


@pytest.fixture(scope="module")
def speech_dir(tiny_checkpoints) -> Path:
    return tiny_checkpoints["custom_voice"] / "speech_tokenizer"


@pytest.fixture(scope="module")
def encoder(speech_dir: Path) -> CodecEncoder:
    return load_codec_encoder(speech_dir, "cpu", torch.float32)


@pytest.fixture(scope="module")
def official(
    oracle: Callable[..., str], speech_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, object]:
    work = tmp_path_factory.mktemp("codec_encode")
    np.savez(work / "wavs.npz", **_signals())
    write_json(work / "released.json", codec_encoder_config("0.6b"))
    out = work / "out.npz"
    oracle("codec_encode.py", str(speech_dir), str(work / "wavs.npz"), str(out), str(work / "released.json"))
    return {"codes": dict(np.load(out)), **json.loads((work / "out.npz.json").read_text())}


def test_config_sizes() -> None:
    for size in ("tiny", "0.6b", "1.7b"):
        cfg = CodecEncoderConfig.from_dict(codec_encoder_config(size))
        assert cfg.samples_per_frame == SAMPLES
        assert (cfg.frame_rate, cfg.encodec_frame_rate, cfg.codebook_size) == (12.5, 25, 2048)
        assert cfg.num_quantizers >= cfg.valid_num_quantizers == 16
    real = CodecEncoderConfig.from_dict(codec_encoder_config("0.6b"))
    assert (real.hidden_size, real.num_hidden_layers, real.codebook_dim, real.num_quantizers) == (
        512,
        8,
        256,
        32,
    )
    # Without `_frame_rate`, Mimi derives 12.5 Hz from the hop and the 2x downsample.
    derived = {k: v for k, v in codec_encoder_config("0.6b").items() if k != "_frame_rate"}
    assert CodecEncoderConfig.from_dict(derived).frame_rate == 12.5


def test_random_init_is_seeded() -> None:
    cfg = CodecEncoderConfig.from_dict(codec_encoder_config("tiny"))
    a, b = CodecEncoder(cfg), CodecEncoder(cfg)
    random_init_(a, torch.Generator().manual_seed(5))
    random_init_(b, torch.Generator().manual_seed(5))
    assert all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_state_dict_matches_official_names(encoder: CodecEncoder, official: dict[str, object]) -> None:
    assert {n: list(t.shape) for n, t in encoder.state_dict().items()} == official["state_dict"]


def test_released_layout_matches_official(official: dict[str, object]) -> None:
    released = CodecEncoder(CodecEncoderConfig.from_dict(codec_encoder_config("0.6b")))
    assert {n: list(t.shape) for n, t in released.state_dict().items()} == official["released_state_dict"]


def test_official_uses_sdpa(official: dict[str, object]) -> None:
    # Our attention is SDPA too; eager attention could round differently near a codebook tie.
    assert official["attn_implementation"] == "sdpa"


@pytest.mark.parametrize("name", ["chirp", "noise", "odd", "long", "short"])
def test_codes_equal_official(encoder: CodecEncoder, official: dict[str, object], name: str) -> None:
    wav = torch.from_numpy(_signals()[name])
    ours = encoder.encode(wav[None])[0]
    theirs = torch.from_numpy(official["codes"][f"single_{name}"])  # type: ignore[index]
    frames = -(-wav.shape[0] // SAMPLES)
    assert ours.dtype == torch.long
    assert ours.shape == theirs.shape == (frames, 16)
    assert torch.equal(ours, theirs)


def test_padded_batch_equals_official(encoder: CodecEncoder, official: dict[str, object]) -> None:
    signals = _signals()
    ours = encoder.encode_batch([torch.from_numpy(w) for w in signals.values()])
    for name, codes in zip(signals, ours, strict=True):
        assert torch.equal(codes, torch.from_numpy(official["codes"][f"batch_{name}"]))  # type: ignore[index]


def test_codes_depend_on_input(encoder: CodecEncoder) -> None:
    signals = _signals()
    chirp = encoder.encode(torch.from_numpy(signals["chirp"])[None])[0]
    noise = encoder.encode(torch.from_numpy(signals["noise"])[None])[0]
    # Every codebook uses many entries over 38 frames, and two inputs give different codes.
    assert min(len(chirp[:, q].unique()) for q in range(16)) >= 10
    assert (chirp[: noise.shape[0]] != noise).float().mean() > 0.9


def test_loader_is_strict(speech_dir: Path, tmp_path: Path) -> None:
    tensors = read_safetensors(speech_dir / "model.safetensors")
    for name in ("config.json", "preprocessor_config.json"):
        (tmp_path / name).write_bytes((speech_dir / name).read_bytes())
    dropped = dict(tensors)
    del dropped["encoder.downsample.conv.weight"]
    save_tensors(tmp_path / "model.safetensors", dropped)
    with pytest.raises(CheckpointError, match="missing 1 tensor"):
        load_codec_encoder(tmp_path)
    extra = dict(tensors, **{"encoder.decoder.layers.0.conv.weight": torch.zeros(1)})
    save_tensors(tmp_path / "model.safetensors", extra)
    with pytest.raises(CheckpointError, match="unexpected 1 tensor"):
        load_codec_encoder(tmp_path)
