"""The speech-tokenizer encoder: 24 kHz reference audio -> 16 codes a frame (12.5 frames/s).

The released encoder is a Mimi codec's encode path (`encoder_config` of speech_tokenizer/config.json):
a causal SEANet conv encoder (960-sample hop), a causal transformer, a 2x downsampling conv, and a
split RVQ (1 semantic + acoustic quantizers), of which the first `encoder_valid_num_quantizers` are kept.
Used for in-context voice cloning (the reference codes).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.checkpoint import CheckpointError, read_json
from voicewire.engine.model.layers import LayerScale
from voicewire.engine.model.weights import load_into, read_safetensors, take_prefix

log = logging.getLogger(__name__)

# speech_tokenizer/preprocessor_config.json as published (transformers' EncodecFeatureExtractor).
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 24000,
}

_ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}


@dataclass(frozen=True)
class CodecEncoderConfig:
    sampling_rate: int
    audio_channels: int
    hidden_size: int
    num_filters: int
    num_residual_layers: int
    upsampling_ratios: tuple[int, ...]
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    use_causal_conv: bool
    pad_mode: str
    compress: int
    use_conv_shortcut: bool
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    num_semantic_quantizers: int
    vector_quantization_hidden_dimension: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    norm_eps: float
    rope_theta: float
    attention_bias: bool
    frame_rate: float
    valid_num_quantizers: int = 16

    @classmethod
    def from_dict(cls, d: dict[str, Any], valid_num_quantizers: int = 16) -> CodecEncoderConfig:
        """From the `encoder_config` section (a MimiConfig dict); unknown keys are ignored."""
        ratios = tuple(int(r) for r in d.get("upsampling_ratios") or (8, 6, 5, 4))
        sampling_rate = int(d.get("sampling_rate", 24000))
        hidden = int(d.get("hidden_size", 512))
        heads = int(d.get("num_attention_heads", 8))
        frame_rate = d.get("_frame_rate", d.get("frame_rate"))
        if frame_rate is None:
            # Mimi's own rule: the conv hop times the 2x downsample.
            frame_rate = sampling_rate / (math.prod(ratios) * 2)
        cfg = cls(
            sampling_rate=sampling_rate,
            audio_channels=int(d.get("audio_channels", 1)),
            hidden_size=hidden,
            num_filters=int(d.get("num_filters", 64)),
            num_residual_layers=int(d.get("num_residual_layers", 1)),
            upsampling_ratios=ratios,
            kernel_size=int(d.get("kernel_size", 7)),
            last_kernel_size=int(d.get("last_kernel_size", 3)),
            residual_kernel_size=int(d.get("residual_kernel_size", 3)),
            dilation_growth_rate=int(d.get("dilation_growth_rate", 2)),
            use_causal_conv=bool(d.get("use_causal_conv", True)),
            pad_mode=str(d.get("pad_mode", "constant")),
            compress=int(d.get("compress", 2)),
            use_conv_shortcut=bool(d.get("use_conv_shortcut", False)),
            codebook_size=int(d.get("codebook_size", 2048)),
            codebook_dim=int(d.get("codebook_dim") or hidden),
            num_quantizers=int(d.get("num_quantizers", 32)),
            num_semantic_quantizers=int(d.get("num_semantic_quantizers", 1)),
            vector_quantization_hidden_dimension=int(d.get("vector_quantization_hidden_dimension", 256)),
            num_hidden_layers=int(d.get("num_hidden_layers", 8)),
            intermediate_size=int(d.get("intermediate_size", 2048)),
            num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads", 8)),
            head_dim=int(d.get("head_dim") or hidden // heads),
            hidden_act=str(d.get("hidden_act", "gelu")),
            norm_eps=float(d.get("norm_eps", 1e-5)),
            rope_theta=float(d.get("rope_theta", 10000.0)),
            attention_bias=bool(d.get("attention_bias", False)),
            frame_rate=float(frame_rate),
            valid_num_quantizers=valid_num_quantizers,
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        problems = []
        if not self.use_causal_conv:
            problems.append("use_causal_conv must be true")
        if self.pad_mode not in ("constant", "replicate"):
            problems.append(f"pad_mode {self.pad_mode!r} is not supported (constant, replicate)")
        if self.hidden_act not in _ACTIVATIONS:
            problems.append(f"hidden_act {self.hidden_act!r} is not supported ({', '.join(_ACTIVATIONS)})")
        if self.audio_channels != 1:
            problems.append("audio_channels must be 1")
        if not self.num_semantic_quantizers < self.valid_num_quantizers <= self.num_quantizers:
            problems.append(f"cannot keep {self.valid_num_quantizers} of {self.num_quantizers} quantizers")
        if self.encodec_frame_rate == self.frame_rate:
            problems.append("frame_rate equal to the conv frame rate (no downsample conv) is not supported")
        if problems:
            raise CheckpointError("unsupported codec encoder config: " + "; ".join(problems))

    @property
    def hop(self) -> int:
        return math.prod(self.upsampling_ratios)

    @property
    def encodec_frame_rate(self) -> int:
        return math.ceil(self.sampling_rate / self.hop)

    @property
    def samples_per_frame(self) -> int:
        # The downsample conv always has stride 2 (as in Mimi).
        return self.hop * 2


class CausalConv(nn.Module):
    """Conv1d with all padding on the left, plus right padding up to a whole number of strides."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        bias: bool = True,
        pad_mode: str = "constant",
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.left = (kernel - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    def forward(self, x: Tensor) -> Tensor:
        # x [B, C, L] -> [B, C', ceil(L / stride)]
        right = -x.shape[-1] % self.stride
        return self.conv(F.pad(x, (self.left, right), mode=self.pad_mode))


class ResnetBlock(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        # Names follow the checkpoint: activations sit at block.0 and block.2.
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                CausalConv(dim, hidden, cfg.residual_kernel_size, dilation=dilation, pad_mode=cfg.pad_mode),
                nn.ELU(),
                CausalConv(hidden, dim, 1, pad_mode=cfg.pad_mode),
            ]
        )
        self.shortcut: nn.Module = (
            CausalConv(dim, dim, 1, pad_mode=cfg.pad_mode) if cfg.use_conv_shortcut else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return self.shortcut(x) + h


class ConvEncoder(nn.Module):
    """SEANet encoder: [B, 1, samples] -> [B, hidden, ceil(samples / hop)]."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv(1, cfg.num_filters, cfg.kernel_size, pad_mode=cfg.pad_mode)]
        width = cfg.num_filters
        for ratio in reversed(cfg.upsampling_ratios):
            for j in range(cfg.num_residual_layers):
                layers.append(ResnetBlock(cfg, width, cfg.dilation_growth_rate**j))
            layers += [nn.ELU(), CausalConv(width, width * 2, ratio * 2, stride=ratio, pad_mode=cfg.pad_mode)]
            width *= 2
        layers += [nn.ELU(), CausalConv(width, cfg.hidden_size, cfg.last_kernel_size, pad_mode=cfg.pad_mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Attention(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.kernels = Kernels()

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.kernels.fuse(pointwise.rotate_pair)(q, k, cos, sin)
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        # Full causal attention: Mimi's encoder builds a plain causal mask (its sliding_window
        # is not applied on this path).
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = self.self_attn_layer_scale(x, self.self_attn(self.input_layernorm(x), cos, sin))
        return self.mlp_layer_scale(x, self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    """Causal transformer over the 25 Hz conv frames: [B, T, hidden] -> [B, T, hidden]."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        pos = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq.float()[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        # Running-mean codebook as trained: the centroids are embed_sum / cluster_usage.
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def table(self) -> Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class VectorQuantizer(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = Codebook(size, dim)


class ResidualQuantizer(nn.Module):
    """Residual VQ in its own projected space; output_proj is decode-side and kept for loading only."""

    def __init__(self, cfg: CodecEncoderConfig, count: int) -> None:
        super().__init__()
        dim = cfg.vector_quantization_hidden_dimension
        self.input_proj: nn.Module | None = None
        self.output_proj: nn.Module | None = None
        if dim != cfg.hidden_size:
            self.input_proj = nn.Conv1d(cfg.hidden_size, dim, 1, bias=False)
            self.output_proj = nn.Conv1d(dim, cfg.hidden_size, 1, bias=False)
        self.layers = nn.ModuleList(
            [VectorQuantizer(cfg.codebook_size, cfg.codebook_dim) for _ in range(count)]
        )

    def encode(self, x: Tensor, count: int) -> Tensor:
        # x [B, hidden, T] -> codes [B, T, count]
        if self.input_proj is not None:
            x = self.input_proj(x)
        residual = x.transpose(1, 2)  # [B, T, D]
        b, t, d = residual.shape
        codes = []
        for layer in self.layers[:count]:
            table = layer.codebook.table()
            dist = torch.cdist(residual.reshape(1, b * t, d).float(), table[None].float())[0]
            idx = dist.argmin(dim=-1).view(b, t)
            residual = residual - F.embedding(idx, table)
            codes.append(idx)
        return torch.stack(codes, dim=-1)


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.semantic = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = ResidualQuantizer(cfg, cfg.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = ResidualQuantizer(
            cfg, cfg.num_quantizers - cfg.num_semantic_quantizers
        )

    def encode(self, x: Tensor, count: int) -> Tensor:
        # Both RVQs quantize the same embeddings: [B, hidden, T] -> [B, T, count]
        semantic = self.semantic_residual_vector_quantizer.encode(x, self.semantic)
        acoustic = self.acoustic_residual_vector_quantizer.encode(x, count - self.semantic)
        return torch.cat((semantic, acoustic), dim=-1)


class CodecEncoder(nn.Module):
    """Mimi's encode path; state_dict names are the checkpoint's under `encoder.`."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ConvEncoder(cfg)
        self.encoder_transformer = Transformer(cfg)
        factor = int(cfg.encodec_frame_rate / cfg.frame_rate)
        self.downsample = CausalConv(
            cfg.hidden_size, cfg.hidden_size, 2 * factor, stride=2, bias=False, pad_mode="replicate"
        )
        self.quantizer = SplitQuantizer(cfg)

    def frames(self, samples: int) -> int:
        """Number of code frames for `samples` of audio: ceil(samples / 1920)."""
        return -(-samples // self.cfg.samples_per_frame)

    @torch.inference_mode()
    def encode(self, audio: Tensor) -> Tensor:
        """audio [B, samples] at 24 kHz -> codes [B, ceil(samples / 1920), valid quantizers] (long).

        Rows of a padded batch see their zero padding (everything is causal, but the last
        frame's downsample pads by repeating), exactly as the official batched encode does.
        """
        x = self.encoder(audio[:, None, :].to(self.downsample.conv.weight.dtype))
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        x = self.downsample(x)
        return self.quantizer.encode(x, self.cfg.valid_num_quantizers)

    def encode_batch(self, wavs: list[Tensor]) -> list[Tensor]:
        """Mono 24 kHz waveforms of any lengths -> codes [frames_i, valid quantizers] each.

        Like the official `Qwen3TTSTokenizer.encode`: right-pad with zeros to the longest, encode
        the batch, keep ceil(len_i / 1920) frames of each row.
        """
        longest = max(w.shape[-1] for w in wavs)
        batch = torch.stack([F.pad(w.float(), (0, longest - w.shape[-1])) for w in wavs])
        codes = self.encode(batch.to(self.downsample.conv.weight.device))
        return [c[: self.frames(w.shape[-1])] for c, w in zip(codes, wavs, strict=True)]


def random_init_(module: CodecEncoder, gen: torch.Generator) -> None:
    """Scaled random weights and random codebooks so the codes depend on the audio: with zero
    codebooks every frame would get the same codes."""

    def normal(t: Tensor, std: float, mean: float = 0.0) -> None:
        t.copy_(torch.randn(t.shape, generator=gen) * std + mean)

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear | nn.Conv1d):
                normal(m.weight, m.weight[0].numel() ** -0.5)
                if m.bias is not None:
                    normal(m.bias, 0.05)
            elif isinstance(m, nn.LayerNorm):
                normal(m.weight, 0.1, 1.0)
                normal(m.bias, 0.05)
            elif isinstance(m, LayerScale):
                normal(m.scale, 0.1, 0.5)
            elif isinstance(m, Codebook):
                # Unit-variance centroids, stored as sum and non-uniform usage like trained ones
                # (the test checks every kept codebook picks many entries).
                normal(m.embed_sum, 1.0)
                m.cluster_usage.copy_(torch.rand(m.cluster_usage.shape, generator=gen) + 0.5)
                m.embed_sum.mul_(m.cluster_usage[:, None])


def load_codec_encoder(
    speech_tokenizer_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> CodecEncoder:
    """The codec encoder of a checkpoint's speech_tokenizer/ folder, loaded strictly.

    The checkpoint's `encoder.*` tensors are exactly our module's (Mimi's decoder-side transformer,
    upsample and decoder are not stored; the RVQ output projections are, and are held unused).
    """
    folder = Path(speech_tokenizer_dir)
    cfg = read_json(folder / "config.json")
    if "encoder_config" not in cfg:
        raise CheckpointError(f"{folder / 'config.json'} has no encoder_config")
    encoder = CodecEncoder(
        CodecEncoderConfig.from_dict(cfg["encoder_config"], int(cfg.get("encoder_valid_num_quantizers", 16)))
    )
    tensors = read_safetensors(folder / "model.safetensors")
    load_into(encoder, take_prefix(tensors, "encoder"), f"{folder / 'model.safetensors'} (encoder.*)")
    log.debug("loaded the codec encoder from %s", folder)
    return encoder.to(device=device, dtype=dtype).eval()
