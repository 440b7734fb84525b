"""The ECAPA-TDNN speaker encoder: reference audio -> an x-vector in talker width (Base clones)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.model import checkpoint, weights
from voicewire.engine.model.mel import SAMPLE_RATE, log_mel


@dataclass
class SpeakerEncoderConfig:
    mel_dim: int
    enc_dim: int
    channels: list[int]
    kernel_sizes: list[int]
    dilations: list[int]
    attention_channels: int
    res2net_scale: int
    se_channels: int
    sample_rate: int

    @classmethod
    def from_dict(cls, d: dict) -> SpeakerEncoderConfig:
        cfg = cls(
            mel_dim=d.get("mel_dim", 128),
            enc_dim=d["enc_dim"],
            channels=list(d["enc_channels"]),
            kernel_sizes=list(d["enc_kernel_sizes"]),
            dilations=list(d["enc_dilations"]),
            attention_channels=d.get("enc_attention_channels", 128),
            res2net_scale=d.get("enc_res2net_scale", 8),
            se_channels=d.get("enc_se_channels", 128),
            sample_rate=d.get("sample_rate", SAMPLE_RATE),
        )
        if not len(cfg.channels) == len(cfg.kernel_sizes) == len(cfg.dilations):
            raise checkpoint.CheckpointError(
                "speaker_encoder_config: enc_channels, kernel sizes and dilations differ in length"
            )
        if cfg.mel_dim != 128 or cfg.sample_rate != SAMPLE_RATE:
            raise checkpoint.CheckpointError(
                "speaker_encoder_config: only 128 mel bins at 24 kHz are supported"
            )
        return cfg


def _conv(c_in: int, c_out: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    """Conv1d + ReLU ("time delay" layer)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _conv(c_in, c_out, kernel, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.conv(x))


class Res2Net(nn.Module):
    """Split channels in `scale` groups; each group after the first adds the previous group's output."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(TDNN(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: Tensor) -> Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        previous = None
        for block, part in zip(self.blocks, parts[1:], strict=True):
            previous = block(part if previous is None else part + previous)
            out.append(previous)
        return torch.cat(out, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = _conv(channels, se_channels)
        self.conv2 = _conv(se_channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(
        self, c_in: int, c_out: int, scale: int, se_channels: int, kernel: int, dilation: int
    ) -> None:
        super().__init__()
        self.tdnn1 = TDNN(c_in, c_out, 1, 1)
        self.res2net_block = Res2Net(c_out, scale, kernel, dilation)
        self.tdnn2 = TDNN(c_out, c_out, 1, 1)
        self.se_block = SqueezeExcitation(c_out, se_channels)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


class AttentiveStatsPool(nn.Module):
    """Attention-weighted mean and std over time, the attention seeing global mean/std too."""

    eps = 1e-12

    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    def _stats(self, x: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
        mean = (weights * x).sum(dim=2)
        std = torch.sqrt((weights * (x - mean[..., None]).pow(2)).sum(dim=2).clamp(self.eps))
        return mean, std

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[-1]
        mean, std = self._stats(x, torch.full_like(x[:, :1], 1.0 / t))
        context = torch.cat((x, mean[..., None].expand(-1, -1, t), std[..., None].expand(-1, -1, t)), dim=1)
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self._stats(x, attention)
        return torch.cat((mean, std), dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch, ks, dl = cfg.channels, cfg.kernel_sizes, cfg.dilations
        blocks: list[nn.Module] = [TDNN(cfg.mel_dim, ch[0], ks[0], dl[0])]
        for i in range(1, len(ch) - 1):
            blocks.append(SERes2NetBlock(ch[i - 1], ch[i], cfg.res2net_scale, cfg.se_channels, ks[i], dl[i]))
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], dl[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim)

    def forward(self, mels: Tensor) -> Tensor:
        """log-mel [B, frames, 128] -> x-vectors [B, enc_dim]."""
        x = mels.transpose(1, 2)
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        # Multi-layer feature aggregation over the SE-Res2Net outputs.
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(x))[..., 0]


def random_init_(encoder: SpeakerEncoder, gen: torch.Generator) -> None:
    """Fan-in-scaled convs so activations keep their scale and the x-vector varies with the audio."""
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, nn.Conv1d):
                fan_in = module.in_channels * module.kernel_size[0]
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
                module.bias.copy_(0.05 * torch.randn(module.bias.shape, generator=gen))


def prepare_reference_audio(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mono float32 at 24 kHz: channels averaged as the official code does, resampled with soxr.

    The official code resamples with librosa (soxr_hq by default); 24 kHz input is untouched by both.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=-1).astype(np.float32)
    if audio.ndim != 1 or audio.size == 0:
        raise ValueError(f"reference audio must be mono or [samples, channels], got shape {audio.shape}")
    if sample_rate != SAMPLE_RATE:
        audio = soxr.resample(audio, sample_rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    if audio.size < 1024:
        raise ValueError(f"reference audio is too short: {audio.size} samples at 24 kHz")
    return audio


@torch.inference_mode()
def extract_xvector(encoder: SpeakerEncoder, audio_24k: np.ndarray | Tensor) -> Tensor:
    """24 kHz mono audio [samples] -> x-vector [enc_dim] (float32, on the encoder's device)."""
    weight = encoder.fc.weight
    audio = torch.as_tensor(np.asarray(audio_24k, dtype=np.float32)).to(weight.device)
    mels = log_mel(audio[None].float())
    return encoder(mels.to(weight.dtype))[0].float()


def load_speaker_encoder(
    model_dir: str | Path, device: torch.device | str, dtype: torch.dtype
) -> SpeakerEncoder:
    model_dir = Path(model_dir)
    config = checkpoint.read_json(model_dir / "config.json")
    tensors = weights.read_safetensors(model_dir / "model.safetensors")
    return load_speaker_encoder_from(config, tensors, torch.device(device), dtype, where=model_dir)


def load_speaker_encoder_from(
    config: dict, tensors: dict[str, Tensor], device: torch.device, dtype: torch.dtype, where: Path
) -> SpeakerEncoder:
    if "speaker_encoder_config" not in config:
        raise checkpoint.CheckpointError(
            f"{where / 'config.json'} has no speaker_encoder_config (Base checkpoints do)"
        )
    encoder = SpeakerEncoder(SpeakerEncoderConfig.from_dict(config["speaker_encoder_config"]))
    where_tensors = f"{where / 'model.safetensors'} (speaker_encoder.)"
    weights.load_into(encoder, weights.take_prefix(tensors, "speaker_encoder"), where_tensors)
    return encoder.to(device=device, dtype=dtype).eval()
