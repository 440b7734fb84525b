import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from voicewire.engine.model.checkpoint import CheckpointError, write_json
from voicewire.engine.model.codec_decoder import (
    CodecDecoder,
    CodecDecoderConfig,
    load_codec_decoder,
    random_init_,
)
from voicewire.engine.model.random_checkpoint import codec_decoder_config, speech_tokenizer_config
from voicewire.engine.model.weights import checkpoint_tensors, read_safetensors, save_tensors, take_prefix

FRAMES = 100  # past the 72-frame attention window
SAMPLES = 1920

# Decoder shapes, as overrides of the tiny checkpoint's decoder_config: the README's tolerances are
# checked on each, as float32 rounding grows with the widths, the depth and the amplitudes.
SHAPES: dict[str, dict[str, object]] = {
    "tiny": {},
    # Twice as wide everywhere, 4 transformer layers, plain multi-head attention.
    "wide": {
        "latent_dim": 64,
        "codebook_dim": 64,
        "vector_quantization_hidden_dimension": 64,
        "decoder_dim": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "head_dim": 16,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
    },
    # 8 transformer layers, 2 heads over 1 KV head, three decoder blocks: 960 samples a frame.
    "deep": {
        "num_hidden_layers": 8,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "decoder_dim": 96,
        "upsample_rates": [8, 6, 5],
    },
}


def _write_speech_tokenizer(folder: Path, tiny_dir: Path, shape: str, seed: int) -> Path:
    """A speech_tokenizer/ folder whose decoder has `shape`, with random weights, and the tiny
    checkpoint's encoder (the official loader builds both)."""
    cfg = speech_tokenizer_config("tiny")
    cfg["decoder_config"].update(SHAPES[shape])
    decoder = CodecDecoder(CodecDecoderConfig.from_dict(cfg["decoder_config"]))
    random_init_(decoder, torch.Generator().manual_seed(seed))
    cfg["decode_upsample_rate"] = decoder.cfg.samples_per_frame
    folder.mkdir()
    write_json(folder / "config.json", cfg)
    (folder / "preprocessor_config.json").write_text((tiny_dir / "preprocessor_config.json").read_text())
    encoder = take_prefix(read_safetensors(tiny_dir / "model.safetensors"), "encoder")
    save_tensors(
        folder / "model.safetensors",
        {
            **{f"encoder.{n}": t for n, t in encoder.items()},
            **{f"decoder.{n}": t for n, t in checkpoint_tensors(decoder).items()},
        },
    )
    return folder


@pytest.fixture(scope="module")
def speech_dirs(tiny_checkpoints, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tiny = tiny_checkpoints["custom_voice"] / "speech_tokenizer"
    root = tmp_path_factory.mktemp("decoder_shapes")
    made = {
        name: _write_speech_tokenizer(root / name, tiny, name, 40 + i)
        for i, name in enumerate(SHAPES)
        if name != "tiny"
    }
    return {"tiny": tiny, **made}


@pytest.fixture(scope="module")
def speech_dir(speech_dirs: dict[str, Path]) -> Path:
    return speech_dirs["tiny"]


@pytest.fixture(scope="module")
def decoders(speech_dirs: dict[str, Path]) -> dict[str, CodecDecoder]:
    return {name: load_codec_decoder(folder, "cpu", torch.float32) for name, folder in speech_dirs.items()}


@pytest.fixture(scope="module")
def decoder(decoders: dict[str, CodecDecoder]) -> CodecDecoder:
    return decoders["tiny"]


@pytest.fixture(scope="module")
def codes() -> torch.Tensor:
    return torch.randint(0, 2048, (2, FRAMES, 16), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def officials(
    oracle: Callable[..., str],
    speech_dirs: dict[str, Path],
    codes: torch.Tensor,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[str, object]]:
    """Each shape's official decode of `codes`, in float32 and in float64 (one oracle run)."""
    work = tmp_path_factory.mktemp("codec_decode")
    np.savez(work / "codes.npz", codes=codes.numpy())
    args = [
        a
        for name, folder in speech_dirs.items()
        for a in (str(folder), str(work / "codes.npz"), str(work / f"{name}.npz"))
    ]
    oracle("codec_decode.py", *args)
    out = {}
    for name in speech_dirs:
        audio = np.load(work / f"{name}.npz")
        out[name] = {
            "audio": torch.from_numpy(audio["audio"]),
            "audio64": torch.from_numpy(audio["audio64"]),
            "names": json.loads((work / f"{name}.npz.json").read_text()),
        }
    return out


@pytest.fixture(scope="module")
def fulls(decoders: dict[str, CodecDecoder], codes: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {name: decoder(codes) for name, decoder in decoders.items()}


@pytest.fixture(scope="module")
def full(fulls: dict[str, torch.Tensor]) -> torch.Tensor:
    return fulls["tiny"]


def test_config_sizes() -> None:
    for size in ("tiny", "0.6b", "1.7b"):
        cfg = CodecDecoderConfig.from_dict(codec_decoder_config(size))
        assert cfg.samples_per_frame == SAMPLES
        assert (cfg.codebook_size, cfg.num_quantizers, cfg.sliding_window) == (2048, 16, 72)
    real = CodecDecoderConfig.from_dict(codec_decoder_config("0.6b"))
    assert (real.hidden_size, real.latent_dim, real.codebook_dim, real.decoder_dim) == (512, 1024, 512, 1536)


def test_random_init_is_seeded() -> None:
    cfg = CodecDecoderConfig.from_dict(codec_decoder_config("tiny"))
    a, b = CodecDecoder(cfg), CodecDecoder(cfg)
    random_init_(a, torch.Generator().manual_seed(5))
    random_init_(b, torch.Generator().manual_seed(5))
    assert all(
        torch.equal(x, y)
        for x, y in zip(checkpoint_tensors(a).values(), checkpoint_tensors(b).values(), strict=True)
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_state_dict_matches_official_names(
    decoders: dict[str, CodecDecoder], officials: dict[str, dict[str, object]], shape: str
) -> None:
    ours = {n: list(t.shape) for n, t in checkpoint_tensors(decoders[shape]).items()}
    assert ours == officials[shape]["names"]


@pytest.mark.parametrize("shape", SHAPES)
def test_float64_decode_equals_official(
    speech_dirs: dict[str, Path], codes: torch.Tensor, officials: dict[str, dict[str, object]], shape: str
) -> None:
    """The same arithmetic as the official decoder, up to the order of its roundings: in float64
    the two agree to 1e-14 (measured 4e-15), so what float32 leaves between them is rounding."""
    decoder = load_codec_decoder(speech_dirs[shape], "cpu", torch.float64)
    with torch.no_grad():
        ours = decoder(codes)
    theirs = officials[shape]["audio64"]
    assert isinstance(theirs, torch.Tensor) and theirs.dtype == torch.float64
    assert (ours - theirs).abs().max().item() < 1e-12


@pytest.mark.parametrize("shape", SHAPES)
def test_full_decode_matches_official(
    decoders: dict[str, CodecDecoder],
    fulls: dict[str, torch.Tensor],
    officials: dict[str, dict[str, object]],
    shape: str,
) -> None:
    """In float32 each decoder is 1-3e-6 from the float64 decode on these shapes (rounding of the
    same sums in other orders), so the two are within 2e-5 of each other."""
    ours, theirs, exact = fulls[shape], officials[shape]["audio"], officials[shape]["audio64"]
    assert isinstance(theirs, torch.Tensor) and isinstance(exact, torch.Tensor)
    assert ours.shape == theirs.shape == (2, FRAMES * decoders[shape].cfg.samples_per_frame)
    assert (ours - theirs).abs().max().item() < 2e-5
    # Our float32 rounding is that of the official decoder, not more: each is within 1e-5 of float64.
    assert (ours.double() - exact).abs().max().item() < 1e-5
    assert (theirs.double() - exact).abs().max().item() < 1e-5


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunks", [[1] * FRAMES, [2] * 50, [7] * 14 + [2], [25] * 4, [3, 1, 30, 5, 61]])
def test_incremental_equals_full(
    decoders: dict[str, CodecDecoder],
    codes: torch.Tensor,
    fulls: dict[str, torch.Tensor],
    shape: str,
    chunks: list[int],
) -> None:
    decoder, samples = decoders[shape], decoders[shape].cfg.samples_per_frame
    state = decoder.new_state(2, "cpu", torch.float32)
    out, start = [], 0
    with torch.no_grad():
        for n in chunks:
            piece = decoder.decode_step(codes[:, start : start + n], state)
            assert piece.shape == (2, n * samples)
            out.append(piece)
            start += n
    assert (torch.cat(out, dim=1) - fulls[shape]).abs().max().item() < 1e-5


@pytest.mark.parametrize("shape", SHAPES)
def test_audio_is_loud_and_causal(
    decoders: dict[str, CodecDecoder], codes: torch.Tensor, fulls: dict[str, torch.Tensor], shape: str
) -> None:
    decoder, full = decoders[shape], fulls[shape]
    rms = full.pow(2).mean(dim=1).sqrt()
    assert (rms > 0.1).all(), rms
    assert (full.abs() >= 1).float().mean() < 0.05  # mostly not clipped
    changed = codes.clone()
    changed[:, 60] = (changed[:, 60] + 1) % 2048
    with torch.no_grad():
        other = decoder(changed)
    cut = 60 * decoder.cfg.samples_per_frame
    assert torch.equal(other[:, :cut], full[:, :cut])
    assert (other[:, cut:] - full[:, cut:]).abs().mean() > 0.01


def test_reset_gives_independent_streams(
    decoder: CodecDecoder, codes: torch.Tensor, full: torch.Tensor
) -> None:
    first, second = codes[0], codes[1]
    state = decoder.new_state(2, "cpu", torch.float32)
    with torch.no_grad():
        # Row 1 first decodes 40 frames of another stream, then is reset and starts `second`.
        decoder.decode_step(torch.stack([first[:40], first[:40]]), state)
        state.reset(torch.tensor([1]))
        a = decoder.decode_step(torch.stack([first[40:70], second[:30]]), state)
        b = decoder.decode_step(torch.stack([first[70:], second[30:60]]), state)
    assert (a[0] - full[0, 40 * SAMPLES : 70 * SAMPLES]).abs().max() < 1e-5
    assert (b[0] - full[0, 70 * SAMPLES :]).abs().max() < 1e-5
    assert (torch.cat([a[1], b[1]]) - full[1, : 60 * SAMPLES]).abs().max() < 1e-5


def test_decoding_some_rows_touches_only_those(
    decoder: CodecDecoder, codes: torch.Tensor, full: torch.Tensor
) -> None:
    state = decoder.new_state(3, "cpu", torch.float32)
    rows = torch.tensor([2, 0])
    with torch.no_grad():
        a = decoder.decode_step(codes[:, :30], state, rows)
        b = decoder.decode_step(codes[:, 30:], state, rows)
    assert (torch.cat([a, b], dim=1) - full).abs().max() < 1e-5
    assert state.pos.tolist() == [FRAMES, 0, FRAMES]
    for context in (*state.conv, *state.keys, *state.values):
        assert not context[1].any()  # row 1 is never read or written
        assert context[0].any() and context[2].any()


def test_folded_quantizer_equals_the_published_sum(decoder: CodecDecoder, codes: torch.Tensor) -> None:
    """Both residual groups: sum the group's codebook entries, project with its 1x1 conv, add."""
    quantizer = decoder.quantizer
    want = 0
    for group, part in ((quantizer.rvq_first, codes[..., :1]), (quantizer.rvq_rest, codes[..., 1:])):
        tables = [slot._codebook.table() for slot in group.vq.layers]
        summed = sum(torch.nn.functional.embedding(part[..., k], t) for k, t in enumerate(tables))
        want = want + summed @ group.output_proj.weight[..., 0].T
    with torch.no_grad():
        got = quantizer(codes)
    assert got.shape == (*codes.shape[:2], decoder.cfg.codebook_dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_unprepared_decoder_says_so() -> None:
    decoder = CodecDecoder(CodecDecoderConfig.from_dict(codec_decoder_config("tiny")))
    with pytest.raises(RuntimeError, match=r"CodecDecoder.prepare\(\)"):
        decoder(torch.zeros(1, 2, 16, dtype=torch.long))


def _broken_copy(speech_dir: Path, folder: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text((speech_dir / "config.json").read_text())
    tensors = read_safetensors(speech_dir / "model.safetensors")
    edit(tensors)
    save_tensors(folder / "model.safetensors", tensors)
    return folder


def test_missing_tensor_is_reported(speech_dir: Path, tmp_path: Path) -> None:
    name = "decoder.pre_transformer.layers.1.self_attn.k_proj.weight"
    folder = _broken_copy(speech_dir, tmp_path / "missing", lambda t: t.pop(name))
    with pytest.raises(
        CheckpointError, match=r"missing 1 tensor\(s\): pre_transformer\.layers\.1\.self_attn\.k_proj"
    ):
        load_codec_decoder(folder)


def test_misshaped_tensor_is_reported(speech_dir: Path, tmp_path: Path) -> None:
    name = "decoder.quantizer.rvq_rest.vq.layers.3._codebook.embedding_sum"

    def shrink(t: dict[str, torch.Tensor]) -> None:
        t[name] = t[name][:1000]

    folder = _broken_copy(speech_dir, tmp_path / "shape", shrink)
    with pytest.raises(
        CheckpointError, match=r"wrong shape .*layers\.3\._codebook\.embedding_sum: checkpoint \(1000, 16\)"
    ):
        load_codec_decoder(folder)
