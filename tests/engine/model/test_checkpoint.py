import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.engine.model.test_text_tokenizer import SPECIAL_TEXTS, TEXTS, as_tokenizer_json
from voicewire.engine.model import checkpoint, weights
from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.model.layers import DecoderConfig, DecoderLayer
from voicewire.engine.model.qwen3_tts import Qwen3TTS


class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)


def _weights() -> dict[str, torch.Tensor]:
    return {k: torch.randn_like(v) for k, v in _Small().state_dict().items()}


def test_load_into_copies_every_tensor() -> None:
    module, tensors = _Small(), _weights()
    weights.load_into(module, tensors, "test.safetensors")
    for name, value in module.state_dict().items():
        assert torch.equal(value, tensors[name])


def test_load_into_names_missing_unexpected_and_misshaped() -> None:
    tensors = _weights()
    del tensors["norm.bias"]
    tensors["proj.extra"] = torch.zeros(2)
    tensors["proj.weight"] = torch.zeros(3, 5)
    with pytest.raises(CheckpointError) as info:
        weights.load_into(_Small(), tensors, "model.safetensors (talker.)")
    message = str(info.value)
    assert "model.safetensors (talker.)" in message
    assert "missing 1 tensor(s): norm.bias" in message
    assert "unexpected 1 tensor(s): proj.extra" in message
    assert "proj.weight: checkpoint (3, 5) vs model (3, 4)" in message


def test_take_prefix_strips_and_filters() -> None:
    tensors = {"talker.a": torch.zeros(1), "talker.b.c": torch.ones(1), "speaker_encoder.a": torch.zeros(1)}
    assert sorted(weights.take_prefix(tensors, "talker")) == ["a", "b.c"]


def test_safetensors_round_trip_and_corrupt_file(tmp_path: Path) -> None:
    tensors = _weights()
    weights.save_tensors(tmp_path / "w.safetensors", tensors)
    back = weights.read_safetensors(tmp_path / "w.safetensors")
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(CheckpointError, match="cannot read"):
        weights.read_safetensors(tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match="missing weights file"):
        weights.read_safetensors(tmp_path / "absent.safetensors")


def test_folder_missing_files_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError) as info:
        checkpoint.resolve_model_dir(tmp_path)
    assert "model.safetensors" in str(info.value)
    assert "speech_tokenizer/config.json" in str(info.value)
    assert "a text tokenizer (tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json)" in str(
        info.value
    )


def test_a_checkpoint_whose_tokenizer_is_tokenizer_json_loads_with_the_same_ids(
    tiny_checkpoints, tiny_models, tmp_path: Path
) -> None:
    folder = as_tokenizer_json(Path(shutil.copytree(tiny_checkpoints["custom_voice"], tmp_path / "fast")))
    assert not (folder / "vocab.json").exists() and not (folder / "merges.txt").exists()
    assert checkpoint.resolve_model_dir(folder) == folder
    fast, original = Qwen3TTS.load(folder).tokenizer, tiny_models["custom_voice"].tokenizer
    for text in TEXTS + SPECIAL_TEXTS:
        assert fast.encode(text) == original.encode(text), text


def test_a_checkpoint_with_neither_tokenizer_form_names_both(tiny_checkpoints, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(tiny_checkpoints["custom_voice"], tmp_path / "none"))
    (folder / "merges.txt").unlink()
    with pytest.raises(CheckpointError) as info:
        checkpoint.resolve_model_dir(folder)
    assert str(info.value) == (
        f"checkpoint folder {folder} is missing: "
        "a text tokenizer (tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json)"
    )


def test_bad_json_is_readable(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        checkpoint.read_json(tmp_path / "config.json")


def test_unreachable_hub_id_names_what_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError) as info:
        checkpoint.resolve_model_dir("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    message = str(info.value)
    assert "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice" in message
    assert "--model tiny" in message
    assert "speech_tokenizer/model.safetensors" in message
    assert "tokenizer.json, or vocab.json + merges.txt" in message


def test_not_a_folder_nor_repo_id() -> None:
    with pytest.raises(CheckpointError, match="neither a checkpoint folder"):
        checkpoint.resolve_model_dir("./no/such/folder")


def test_dtype_and_device_parsing() -> None:
    assert weights.parse_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="allowed: float32, bfloat16, float16"):
        weights.parse_dtype("int8")
    assert weights.parse_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="allowed: cpu, cuda"):
        weights.parse_device("mps")


def test_stacked_projections_load_from_and_save_as_separate_tensors() -> None:
    cfg = DecoderConfig(
        hidden_size=8, intermediate_size=12, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4,
        rms_norm_eps=1e-6, rope_theta=10000.0,
    )  # fmt: skip
    layer = DecoderLayer(cfg)
    names = weights.checkpoint_tensors(layer)
    assert {n: tuple(t.shape) for n, t in names.items() if "proj" in n} == {
        "self_attn.q_proj.weight": (8, 8),
        "self_attn.k_proj.weight": (4, 8),
        "self_attn.v_proj.weight": (4, 8),
        "self_attn.o_proj.weight": (8, 8),
        "mlp.gate_proj.weight": (12, 8),
        "mlp.up_proj.weight": (12, 8),
        "mlp.down_proj.weight": (8, 12),
    }
    tensors = {n: torch.randn(t.shape) for n, t in names.items()}
    weights.load_into(layer, tensors, "layer.safetensors")
    # One GEMM gives each projection's own output, and the parts read back as loaded.
    x = torch.randn(3, 8)
    outputs = layer.self_attn.qkv_proj.split(layer.self_attn.qkv_proj(x))
    outputs += layer.mlp.gate_up_proj.split(layer.mlp.gate_up_proj(x))
    for out, name in zip(outputs, ("q", "k", "v", "gate", "up"), strict=True):
        part = f"self_attn.{name}_proj.weight" if len(name) == 1 else f"mlp.{name}_proj.weight"
        torch.testing.assert_close(out, x @ tensors[part].T)
    saved = weights.checkpoint_tensors(layer)
    assert all(torch.equal(saved[n], tensors[n]) for n in tensors)
