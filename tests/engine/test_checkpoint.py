from pathlib import Path

import pytest
import torch
from torch import nn

from voicewire.engine import checkpoint
from voicewire.engine.checkpoint import CheckpointError


class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)


def _weights() -> dict[str, torch.Tensor]:
    return {k: torch.randn_like(v) for k, v in _Small().state_dict().items()}


def test_load_into_copies_every_tensor() -> None:
    module, tensors = _Small(), _weights()
    checkpoint.load_into(module, tensors, "test.safetensors")
    for name, value in module.state_dict().items():
        assert torch.equal(value, tensors[name])


def test_load_into_names_missing_unexpected_and_misshaped() -> None:
    tensors = _weights()
    del tensors["norm.bias"]
    tensors["proj.extra"] = torch.zeros(2)
    tensors["proj.weight"] = torch.zeros(3, 5)
    with pytest.raises(CheckpointError) as info:
        checkpoint.load_into(_Small(), tensors, "model.safetensors (talker.)")
    message = str(info.value)
    assert "model.safetensors (talker.)" in message
    assert "missing 1 tensor(s): norm.bias" in message
    assert "unexpected 1 tensor(s): proj.extra" in message
    assert "proj.weight: checkpoint (3, 5) vs model (3, 4)" in message


def test_take_prefix_strips_and_filters() -> None:
    tensors = {"talker.a": torch.zeros(1), "talker.b.c": torch.ones(1), "speaker_encoder.a": torch.zeros(1)}
    assert sorted(checkpoint.take_prefix(tensors, "talker")) == ["a", "b.c"]


def test_safetensors_round_trip_and_corrupt_file(tmp_path: Path) -> None:
    tensors = _weights()
    checkpoint.save_tensors(tmp_path / "w.safetensors", tensors)
    back = checkpoint.read_safetensors(tmp_path / "w.safetensors")
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(CheckpointError, match="cannot read"):
        checkpoint.read_safetensors(tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match="missing weights file"):
        checkpoint.read_safetensors(tmp_path / "absent.safetensors")


def test_folder_missing_files_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError) as info:
        checkpoint.resolve_model_dir(tmp_path)
    assert "model.safetensors" in str(info.value)
    assert "speech_tokenizer/config.json" in str(info.value)


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


def test_not_a_folder_nor_repo_id() -> None:
    with pytest.raises(CheckpointError, match="neither a checkpoint folder"):
        checkpoint.resolve_model_dir("./no/such/folder")


def test_dtype_and_device_parsing() -> None:
    assert checkpoint.parse_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="allowed: float32, bfloat16, float16"):
        checkpoint.parse_dtype("int8")
    assert checkpoint.parse_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="allowed: cpu, cuda"):
        checkpoint.parse_device("mps")
