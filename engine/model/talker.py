"""The talker: a Qwen3 decoder over summed codec + text rows that emits codebook 0 of each frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import checkpoint, weights
from voicewire.engine.model.code_predictor import CodePredictor, CodePredictorConfig
from voicewire.engine.model.layers import DecoderConfig, DecoderStack, scaled_init_


@dataclass
class TalkerConfig:
    decoder: DecoderConfig
    predictor: CodePredictorConfig
    vocab_size: int  # codec vocab incl. control ids (3072)
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    languages: dict[str, int] = field(default_factory=dict)
    speakers: dict[str, int] = field(default_factory=dict)
    speaker_dialects: dict[str, str | bool] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> TalkerConfig:
        if d.get("hidden_act", "silu") != "silu":
            raise checkpoint.CheckpointError(f"talker hidden_act {d['hidden_act']!r} is not supported (silu)")
        return cls(
            decoder=DecoderConfig.from_dict(d),
            predictor=CodePredictorConfig.from_dict(d["code_predictor_config"]),
            vocab_size=d["vocab_size"],
            text_vocab_size=d["text_vocab_size"],
            text_hidden_size=d["text_hidden_size"],
            num_code_groups=d["num_code_groups"],
            codec_pad_id=d["codec_pad_id"],
            codec_bos_id=d["codec_bos_id"],
            codec_eos_id=d["codec_eos_token_id"],
            codec_think_id=d["codec_think_id"],
            codec_nothink_id=d["codec_nothink_id"],
            codec_think_bos_id=d["codec_think_bos_id"],
            codec_think_eos_id=d["codec_think_eos_id"],
            languages={k.lower(): v for k, v in (d.get("codec_language_id") or {}).items()},
            speakers={k.lower(): v for k, v in (d.get("spk_id") or {}).items()},
            speaker_dialects={k.lower(): v for k, v in (d.get("spk_is_dialect") or {}).items()},
        )


class TextProjection(nn.Module):
    """Text embedding width -> talker width: Linear, SiLU, Linear."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerModel(DecoderStack):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.decoder)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.decoder.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hidden = cfg.decoder.hidden_size
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, hidden)
        self.codec_head = nn.Linear(hidden, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.predictor, hidden)
        self.kernels = Kernels()  # the engine's, once bound: its layers and code predictor hold it too

    def embed_text(self, ids: Tensor) -> Tensor:
        """Text ids [...] -> text-track rows [..., H]."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: Tensor) -> Tensor:
        """Codec ids (codebook 0 and control ids) [...] -> rows [..., H]."""
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: Tensor) -> Tensor:
        """A frame's 16 codes [B, 16] -> the sum of their embeddings [B, H]."""
        tables = [emb.weight for emb in self.code_predictor.model.codec_embedding]
        return self.kernels.fuse(pointwise.frame_embedding)(codes, self.model.codec_embedding.weight, tables)

    def forward(self, x: Tensor, positions: Tensor, cache) -> tuple[Tensor, Tensor]:
        """Rows [B, T, H] at positions [B, T] -> (hidden [B, T, H], codebook-0 logits [B, T, V])."""
        hidden = self.model(x, positions, cache)
        return hidden, self.codec_head(hidden)


def random_init_(talker: Talker, gen: torch.Generator) -> None:
    scaled_init_(talker, gen)


def load_talker(model_dir: str | Path, device: torch.device | str, dtype: torch.dtype) -> Talker:
    model_dir = Path(model_dir)
    config = checkpoint.read_json(model_dir / "config.json")
    tensors = weights.read_safetensors(model_dir / "model.safetensors")
    return load_talker_from(config, tensors, torch.device(device), dtype, where=model_dir)


def load_talker_from(
    config: dict, tensors: dict[str, Tensor], device: torch.device, dtype: torch.dtype, where: Path
) -> Talker:
    if "talker_config" not in config:
        raise checkpoint.CheckpointError(f"{where / 'config.json'} has no talker_config")
    try:
        cfg = TalkerConfig.from_dict(config["talker_config"])
    except KeyError as exc:
        raise checkpoint.CheckpointError(f"{where / 'config.json'}: talker_config lacks {exc}") from exc
    with torch.device("meta"):
        talker = Talker(cfg)
    talker = talker.to_empty(device=device).to(dtype)
    weights.load_into(
        talker, weights.take_prefix(tensors, "talker"), f"{where / 'model.safetensors'} (talker.)"
    )
    return talker.eval()
