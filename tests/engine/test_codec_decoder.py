import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from voicewire.engine.checkpoint import CheckpointError, checkpoint_tensors, read_safetensors, save_tensors
from voicewire.engine.codec_decoder import CodecDecoder, CodecDecoderConfig, load_codec_decoder, random_init_
from voicewire.engine.tiny import codec_decoder_config

FRAMES = 100  # past the 72-frame attention window
SAMPLES = 1920


@pytest.fixture(scope="module")
def speech_dir(tiny_checkpoints) -> Path:
    return tiny_checkpoints["custom_voice"] / "speech_tokenizer"


@pytest.fixture(scope="module")
def decoder(speech_dir: Path) -> CodecDecoder:
    return load_codec_decoder(speech_dir, "cpu", torch.float32)


@pytest.fixture(scope="module")
def codes() -> torch.Tensor:
    return torch.randint(0, 2048, (2, FRAMES, 16), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def official(
    oracle: Callable[..., str],
    speech_dir: Path,
    codes: torch.Tensor,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, object]:
    work = tmp_path_factory.mktemp("codec_decode")
    np.savez(work / "codes.npz", codes=codes.numpy())
    out = work / "out.npz"
    oracle("codec_decode.py", str(speech_dir), str(work / "codes.npz"), str(out))
    names = json.loads((work / "out.npz.json").read_text())
    return {"audio": torch.from_numpy(np.load(out)["audio"]), "names": names}


@pytest.fixture(scope="module")
def full(decoder: CodecDecoder, codes: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return decoder(codes)


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


def test_state_dict_matches_official_names(decoder: CodecDecoder, official: dict[str, object]) -> None:
    ours = {n: list(t.shape) for n, t in checkpoint_tensors(decoder).items()}
    assert ours == official["names"]


def test_full_decode_matches_official(full: torch.Tensor, official: dict[str, object]) -> None:
    theirs = official["audio"]
    assert isinstance(theirs, torch.Tensor)
    assert full.shape == theirs.shape == (2, FRAMES * SAMPLES)
    assert (full - theirs).abs().max().item() < 1e-4


@pytest.mark.parametrize("chunks", [[1] * FRAMES, [2] * 50, [7] * 14 + [2], [25] * 4, [3, 1, 30, 5, 61]])
def test_incremental_equals_full(
    decoder: CodecDecoder, codes: torch.Tensor, full: torch.Tensor, chunks: list[int]
) -> None:
    state = decoder.new_state(2, "cpu", torch.float32)
    out, start = [], 0
    with torch.no_grad():
        for n in chunks:
            piece = decoder.decode_step(codes[:, start : start + n], state)
            assert piece.shape == (2, n * SAMPLES)
            out.append(piece)
            start += n
    assert (torch.cat(out, dim=1) - full).abs().max().item() < 1e-5


def test_audio_is_loud_and_causal(decoder: CodecDecoder, codes: torch.Tensor, full: torch.Tensor) -> None:
    rms = full.pow(2).mean(dim=1).sqrt()
    assert (rms > 0.1).all(), rms
    assert (full.abs() >= 1).float().mean() < 0.05  # mostly not clipped
    changed = codes.clone()
    changed[:, 60] = (changed[:, 60] + 1) % 2048
    with torch.no_grad():
        other = decoder(changed)
    cut = 60 * SAMPLES
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
