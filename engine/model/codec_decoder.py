"""The codec decoder (speech_tokenizer `decoder.*`): 16 codes per frame -> 1920 samples at 24 kHz.

RVQ dequantize -> causal conv -> sliding-window transformer -> 2x2 transposed-conv upsampling with
ConvNeXt blocks -> SnakeBeta/conv decoder blocks (x8, x5, x4, x3) -> samples clamped to ±1.

Everything is causal, so decoding runs incrementally: `decode_step` takes any number of new frames
per stream and returns exactly their samples, carrying per-stream context in a `CodecDecoderState`
(the last 71 keys/values of every attention layer, the left context of every causal conv, the last
input frame of every overlapping transposed conv). A full decode is one step on a fresh state.
Codes are frame-major, `[B, T, 16]`, as the talker emits them and as `Qwen3TTSTokenizer.decode` takes them.

Activations are time-major, `[B, T, C]`, from the dequantizer to the last conv: convolutions run
channels-last (cuDNN's fast bf16 kernels are NHWC, so channels-first tensors cost a transpose on
each side of every conv), residual sums read contiguous tensors, and each SnakeBeta writes its
conv's left context and its own output in one pass (on CUDA a Triton kernel, `fused_snake`),
instead of a `cat` after it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.checkpoint import CheckpointError, read_json
from voicewire.engine.model.layers import MLP, LayerScale, RMSNorm, weight_parts
from voicewire.engine.model.weights import load_into, read_safetensors, take_prefix

if TYPE_CHECKING:
    from voicewire.engine.kernels.fused_conv import ConvWeight

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodecDecoderConfig:
    """The `decoder_config` section of speech_tokenizer/config.json."""

    codebook_size: int
    codebook_dim: int
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    sliding_window: int
    num_quantizers: int
    num_semantic_quantizers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int
    attention_bias: bool

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodecDecoderConfig:
        required = (
            "codebook_size codebook_dim latent_dim hidden_size intermediate_size num_hidden_layers "
            "num_attention_heads num_key_value_heads rms_norm_eps rope_theta sliding_window "
            "num_quantizers upsample_rates upsampling_ratios decoder_dim"
        ).split()
        missing = [k for k in required if k not in d]
        if missing:
            raise CheckpointError(f"decoder_config lacks {', '.join(missing)}")
        if d.get("hidden_act", "silu") != "silu":
            raise CheckpointError(
                f"decoder_config hidden_act {d['hidden_act']!r} is not supported (only silu)"
            )
        return cls(
            codebook_size=int(d["codebook_size"]),
            codebook_dim=int(d["codebook_dim"]),
            latent_dim=int(d["latent_dim"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]),
            num_attention_heads=int(d["num_attention_heads"]),
            num_key_value_heads=int(d["num_key_value_heads"]),
            head_dim=int(d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]),
            rms_norm_eps=float(d["rms_norm_eps"]),
            rope_theta=float(d["rope_theta"]),
            sliding_window=int(d["sliding_window"]),
            num_quantizers=int(d["num_quantizers"]),
            # The official decoder hard-codes one semantic quantizer (`rvq_first`).
            num_semantic_quantizers=int(d.get("num_semantic_quantizers", 1)),
            upsample_rates=tuple(int(r) for r in d["upsample_rates"]),
            upsampling_ratios=tuple(int(r) for r in d["upsampling_ratios"]),
            decoder_dim=int(d["decoder_dim"]),
            attention_bias=bool(d.get("attention_bias", False)),
        )

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates + self.upsampling_ratios)


@dataclass
class CodecDecoderState:
    """Per-stream decoding context for a batch of stream slots; row b is slot b.

    Allocated once by `CodecDecoder.new_state`; `decode_step` reads and writes the rows it decodes
    (through `StateRows`). Every conv's carried context lies in one buffer, a row per slot, so a
    pass gathers and scatters all of a row's contexts at once: one kernel each way, where a gather
    and a scatter per conv were some forty small kernels a pass (a tenth of the decoder's GPU time
    at 256 streams; docs/log/2026-11.md, "Traces of where the engine's time goes").
    """

    conv_rows: Tensor  # [B, sum of the convs' context x C_in]: every conv's context, side by side
    conv: list[Tensor]  # per conv slot: its view of conv_rows, [B, left context, C_in]
    keys: list[Tensor]  # per transformer layer: [B, kv_heads, window - 1, head_dim], after RoPE
    values: list[Tensor]
    pos: Tensor  # [B] int64: frames decoded so far (RoPE position and key validity)

    def reset(self, rows: Tensor) -> None:
        """Start the streams in `rows` (int64 [n]) afresh, writing those rows only. No host sync."""
        for buf in (self.conv_rows, *self.keys, *self.values, self.pos):
            buf.index_fill_(0, rows, 0)

    def rows(self, index: Tensor) -> StateRows:
        """The rows `index` (int64 [n], distinct except for rows nobody reads back) for one pass."""
        carried = self.conv_rows.index_select(0, index)
        return StateRows(self, index, self.pos.index_select(0, index), carried, torch.empty_like(carried))


def conv_views(rows: Tensor, shapes: list[tuple[int, int]]) -> list[Tensor]:
    """Each conv's [B, context, C_in] view of `rows` [B, sum of context x C_in], in order."""
    views, start = [], 0
    for context, channels in shapes:
        size = context * channels
        views.append(rows[:, start : start + size].view(rows.shape[0], context, channels))
        start += size
    return views


@dataclass
class StateRows:
    """Some rows of a `CodecDecoderState`, as one decoder pass reads and writes them: the convs'
    contexts gathered once as the pass begins (`carried`), each conv's new tail written to `tails`
    as it runs, and `tails` scattered back once as it ends (`advance`); the window's keys and
    values gathered where they are used and written straight back."""

    state: CodecDecoderState
    index: Tensor  # int64 [n]: the state's rows, in the pass's batch order
    pos: Tensor  # [n] int64: their positions before the pass
    carried: Tensor  # [n, state.conv_rows' width]: the rows' contexts before the pass
    tails: Tensor  # the same after it, filled conv by conv

    def __post_init__(self) -> None:
        shapes = [(view.shape[1], view.shape[2]) for view in self.state.conv]
        self._carried, self._tails = conv_views(self.carried, shapes), conv_views(self.tails, shapes)

    def conv(self, slot: int) -> Tensor:
        return self._carried[slot]

    def tail(self, slot: int) -> Tensor:
        """Where conv `slot`'s next context goes: its last `context` input frames of this pass."""
        return self._tails[slot]

    def window(self, layer: int) -> tuple[Tensor, Tensor]:
        """The carried keys and values of a transformer layer."""
        keys, values = self.state.keys[layer], self.state.values[layer]
        return keys.index_select(0, self.index), values.index_select(0, self.index)

    def windows(self, layer: int) -> tuple[Tensor, Tensor]:
        """A transformer layer's carried keys and values of every slot, for a kernel that reads and
        writes the rows' windows where they lie (engine.decoder_window)."""
        return self.state.keys[layer], self.state.values[layer]

    def set_window(self, layer: int, keys: Tensor, values: Tensor) -> None:
        self.state.keys[layer].index_copy_(0, self.index, keys)
        self.state.values[layer].index_copy_(0, self.index, values)

    def advance(self, frames: int) -> None:
        """The pass is over: its rows' new contexts and positions go back to the state."""
        self.state.conv_rows.index_copy_(0, self.index, self.tails)
        self.state.pos.index_copy_(0, self.index, self.pos + frames)


# --- dequantizer ------------------------------------------------------------------------------


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        # Stored as EMA sums and counts; the entry is their ratio.
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class CodebookSlot(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class CodebookStack(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CodebookSlot(size, dim) for _ in range(count))


class ResidualGroup(nn.Module):
    """A group of residual codebooks summed, then projected to codebook_dim by a 1x1 conv."""

    def __init__(self, count: int, size: int, dim: int, outer_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(outer_dim, dim, 1, bias=False)  # encoder side; unused here
        self.output_proj = nn.Conv1d(dim, outer_dim, 1, bias=False)
        self.vq = CodebookStack(count, size, dim)

    def projected_tables(self) -> list[Tensor]:
        """Each codebook's entries through the output projection, [size, outer_dim] in float64:
        the projection is linear, so projecting the sum equals summing the projected entries.
        Projected in float64 so that folding adds no rounding of its own: in float32 the
        projection's rounding came on top of the sum's, and a float64 decoder differed from the
        official one in float64 by 4e-7 instead of 4e-15 (it projects the sum at the weights' dtype)."""
        proj = self.output_proj.weight[..., 0].double()
        return [slot._codebook.table().double() @ proj.T for slot in self.vq.layers]


class Quantizer(nn.Module):
    """Codes [B, n, Q] -> the dequantized frames [B, n, codebook_dim].

    Both residual groups fold into one table of projected entries (`fold`, once the weights are in),
    so a frame is one gather and one sum: the published form (16 tables from EMA sums, 16 lookups,
    two projections) was ~65 small kernels per decoder pass."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        half, q0 = cfg.codebook_dim // 2, cfg.num_semantic_quantizers
        self.rvq_first = ResidualGroup(q0, cfg.codebook_size, half, cfg.codebook_dim)
        self.rvq_rest = ResidualGroup(cfg.num_quantizers - q0, cfg.codebook_size, half, cfg.codebook_dim)
        offsets = torch.arange(cfg.num_quantizers) * cfg.codebook_size  # codebook k's rows in `folded`
        self.register_buffer("offsets", offsets, persistent=False)
        self.register_buffer("folded", torch.zeros(0), persistent=False)

    @torch.no_grad()
    def fold(self) -> None:
        """Fill `folded` [Q * codebook_size, codebook_dim] from the loaded weights, in float64 and
        stored in the weights' dtype."""
        tables = self.rvq_first.projected_tables() + self.rvq_rest.projected_tables()
        self.folded = torch.cat(tables).to(self.rvq_first.output_proj.weight.dtype)

    def forward(self, codes: Tensor) -> Tensor:
        if self.folded.numel() == 0:
            raise RuntimeError(
                "the quantizer's table is not folded: call CodecDecoder.prepare() after loading"
            )
        return F.embedding(codes + self.offsets, self.folded).sum(dim=-2, dtype=self.folded.dtype)


# --- convolutions with carried left context -----------------------------------------------------

TENSOR_CORE_CHANNELS = 8  # fewer output channels than this get no tensor-core conv kernel


def conv_time_major(conv: nn.Conv1d | nn.ConvTranspose1d, x: Tensor, with_bias: bool = True) -> Tensor:
    """`conv` of time-major x [B, T, C_in] -> [B, T', C_out]. The channels-first view x.mT of a
    time-major tensor is channels-last, so cuDNN reads and writes it as it is. As 2-D convs: a 1-D
    conv copies a permuted input to channels-first before anything else. `with_bias=False` leaves
    out the conv's bias, for the caller to add in its next pass."""
    if conv.groups > 1:
        # Depthwise (the ConvNeXt blocks, at the frame rate): cuDNN's channels-last kernel for it
        # ran over a second at B=256 x 8 frames; PyTorch's own channels-first one takes 0.1 ms.
        assert with_bias
        return conv(x.mT.contiguous()).mT.contiguous()
    weight, bias = conv.weight, conv.bias if with_bias else None
    if isinstance(conv, nn.Conv1d) and conv.kernel_size == (1,):
        # A 1x1 conv is a matmul; as a conv it came back channels-first.
        return F.linear(x, weight[..., 0], bias)
    extra = 0
    if isinstance(conv, nn.Conv1d) and conv.out_channels < TENSOR_CORE_CHANNELS:
        # The last conv has one output channel, and cuDNN's kernel for that shape ran 20 ms at
        # B=256 x 8 frames. Zero channels up to eight get a tensor-core kernel; they are dropped.
        extra = TENSOR_CORE_CHANNELS - conv.out_channels
        weight = F.pad(weight, (0, 0, 0, 0, 0, extra))
        bias = F.pad(bias, (0, extra)) if bias is not None else None
    # On a CPU, oneDNN's channels-last float32 conv rounds more than its channels-first one as the
    # fan-in grows (at the released 1024 x 7 inputs: 1.0e-5 against 2.7e-6 at most from float64),
    # yet the audio stays well inside the README's tolerances (tests/engine/model/test_codec_decoder.py),
    # and channels-first ran 1.5-3x slower on 2 cores at the tiny checkpoint's shapes.
    x4, w4 = x.mT.unsqueeze(2), weight.unsqueeze(2)  # [B, C, 1, T], channels-last
    stride, dilation, padding = (1, conv.stride[0]), (1, conv.dilation[0]), (0, conv.padding[0])
    # The bias is added here, not by the conv: on a channels-last output, PyTorch's bias add is a
    # strided kernel (12 of 62 ms of a B=256 x 8 decode on an H100); on the time-major view, a flat one.
    if isinstance(conv, nn.ConvTranspose1d):
        out_pad = (0, conv.output_padding[0])
        out = F.conv_transpose2d(x4, w4, None, stride, padding, out_pad, 1, dilation)
    else:
        out = F.conv2d(x4, w4, None, stride, padding, dilation)
    out = out.squeeze(2).mT  # [B, T', C_out], contiguous
    if bias is not None:
        out.add_(bias)
    return out[..., : conv.out_channels] if extra else out


def conv_input(x: Tensor, state: StateRows, slot: int, act: SnakeBeta | None) -> Tensor:
    """act(x) after the carried context of conv slot `slot` (-1: a conv without context) along
    time; the context is updated to the last frames."""
    if slot < 0:
        return x if act is None else act(x)
    context, tail = state.conv(slot), state.tail(slot)
    if act is not None:
        return act(x, context=context, tail=tail)
    full = torch.cat([context, x], dim=1)
    tail.copy_(full[:, -context.shape[1] :])
    return full


FUSED_CONV_CHANNELS = 16  # channels a fused conv takes in multiples of (fused_conv.MIN_BLOCK_K)
FUSED_UNIT_CHANNELS = 128  # the widest residual unit that runs as one kernel (fused_conv.UNIT_CHANNELS)


def pack_conv(conv: nn.Conv1d | nn.ConvTranspose1d) -> ConvWeight:
    """`conv`'s weight and bias as engine.fused_conv's kernel reads them."""
    from voicewire.engine.kernels import fused_conv  # Triton, which CUDA builds of torch carry

    if isinstance(conv, nn.ConvTranspose1d):
        return fused_conv.pack_transposed(conv.weight, conv.bias, conv.stride[0])
    return fused_conv.pack(conv.weight, conv.bias, conv.dilation[0])


def fused_conv_weight(module: CausalConv | CausalTransConv, x: Tensor, rows: int) -> ConvWeight | None:
    """`module`'s packed weight when its conv of x, `rows` output rows (B * T), runs as
    engine.fused_conv's kernel: chosen, on CUDA, widths it takes (the last conv's one output
    channel is cuDNN's, with its padding), and rows enough to fill the GPU (`fused_conv.fills`).
    The weight is packed on first use, in the warm-up before any graph is captured."""
    conv = module.conv
    if not (module.kernels.fused_conv and x.is_cuda and conv.groups == 1):
        return None
    if conv.in_channels % FUSED_CONV_CHANNELS or conv.out_channels < FUSED_CONV_CHANNELS:
        return None
    from voicewire.engine.kernels import fused_conv

    if module.packed is None:
        module.packed = pack_conv(conv)
    return module.packed if fused_conv.fills(rows, module.packed, x.device) else None


class CausalConv(nn.Module):
    """Conv1d (stride 1) over [left context, act(x)] for time-major x; the context is zeros at
    stream start. `act` is the SnakeBeta before the conv, if any, applied here to fuse the copy."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.context = (kernel - 1) * dilation
        self.slot = -1  # index into CodecDecoderState.conv, set by CodecDecoder (stays -1 without context)
        self.kernels = Kernels()
        self.packed: ConvWeight | None = None  # the weight as `fused_conv` reads it

    def forward(
        self,
        x: Tensor,
        state: StateRows,
        act: SnakeBeta | None = None,
        residual: Tensor | None = None,
        then: SnakeBeta | None = None,
    ) -> Tensor:
        """then(conv(act(x)) + residual): `residual` added to the output if given, and `then`, the
        activation after the conv, if given. `then` takes the conv's bias into its own pass: one
        trip over the largest tensor less."""
        full = conv_input(x, state, self.slot, act)
        packed = fused_conv_weight(self, x, x.shape[0] * x.shape[1])
        if packed is not None:
            from voicewire.engine.kernels import fused_conv

            out = fused_conv.conv(full, packed, residual, with_bias=then is None)
        else:
            out = conv_time_major(self.conv, full, with_bias=then is None)
            out = out if residual is None else residual + out
        return out if then is None else then(out, self.conv.bias)


class CausalTransConv(nn.Module):
    """ConvTranspose1d whose output is cut to n * stride per n inputs (the official right trim).

    Output block i also receives the kernel tail of input i-1, so the last input frames are carried.
    """

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.context = -(-(kernel - stride) // stride)
        self.slot = -1
        self.kernels = Kernels()
        self.packed: ConvWeight | None = None  # as in CausalConv

    def forward(self, x: Tensor, state: StateRows, act: SnakeBeta | None = None) -> Tensor:
        b, n, _ = x.shape
        full = conv_input(x, state, self.slot, act)
        packed = fused_conv_weight(self, x, b * n)
        if packed is not None:
            from voicewire.engine.kernels import fused_conv

            # [B, n, stride * C_out]: each frame's stride samples side by side, as [B, n * stride, C_out].
            return fused_conv.conv(full, packed).view(b, n * self.stride, -1)
        out = conv_time_major(self.conv, full)
        if self.context == 0:
            return out
        start = self.context * self.stride
        return out[:, start : start + n * self.stride]


class SnakeBeta(nn.Module):
    """x + sin²(x·e^alpha) / e^beta, per channel (alpha and beta stored as logs), x time-major."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.kernels = Kernels()

    def forward(
        self, x: Tensor, bias: Tensor | None = None, context: Tensor | None = None, tail: Tensor | None = None
    ) -> Tensor:
        """act(x + bias) [B, T, C], after `context` [B, c, C] along time if given (a conv's input);
        with `tail` [B, c, C], its last c times are written there too (the conv's next context)."""
        if self.kernels.fused_snake and x.is_cuda:
            from voicewire.engine.kernels import fused_snake  # Triton, which CUDA builds of torch carry

            return fused_snake.snake_beta(x, self.alpha, self.beta, bias, context, tail=tail)
        if context is None:
            return pointwise.snake_beta(x, self.alpha, self.beta, bias)
        assert bias is None
        full = pointwise.snake_beta_after(context, x, self.alpha, self.beta)
        if tail is not None:
            tail.copy_(full[:, -context.shape[1] :])
        return full


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))
        self.kernels = Kernels()

    def forward(self, x: Tensor, state: StateRows) -> Tensor:
        h = self.pwconv2(self.act(self.pwconv1(self.norm(self.dwconv(x, state)))))
        return self.kernels.fuse(pointwise.scaled_add)(x, self.gamma, h)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: Tensor, state: StateRows) -> Tensor:
        if self.conv1.kernels.fused_unit and x.shape[-1] <= FUSED_UNIT_CHANNELS:
            rows = x.shape[0] * x.shape[1]
            first, second = fused_conv_weight(self.conv1, x, rows), fused_conv_weight(self.conv2, x, rows)
            if first is not None and second is not None:
                from voicewire.engine.kernels import fused_conv

                full = conv_input(x, state, self.conv1.slot, self.act1)
                return fused_conv.unit(
                    full, first, fused_conv.Snake(self.act2.alpha, self.act2.beta), second, x
                )
        h = self.conv1(x, state, self.act1, then=self.act2)
        return self.conv2(h, state, residual=x)


class DecoderBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        units = [ResidualUnit(c_out, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList([SnakeBeta(c_in), CausalTransConv(c_in, c_out, 2 * rate, rate), *units])

    def forward(self, x: Tensor, state: StateRows) -> Tensor:
        act, trans_conv, *units = self.block
        x = trans_conv(x, state, act)
        for unit in units:
            x = unit(x, state)
        return x


# --- sliding-window transformer -----------------------------------------------------------------


@pointwise.fusable
def window_rope_and_mask(
    pos: Tensor, n: int, past: int, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor]:
    """For the next n frames of rows at positions `pos` [B]: RoPE cos and sin [B, n, 1, head_dim]
    (angles in float32, as upstream), and the attention mask [B, 1, n, past + n] over the carried
    window and the chunk. Query i sees keys j with i <= j <= i + past, the 72 frames ending at
    itself, except keys before the stream start."""
    dev = pos.device
    steps = torch.arange(n, device=dev)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=dev).float() / head_dim))
    freqs = (pos[:, None] + steps).float()[..., None] * inv_freq  # [B, n, head_dim / 2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, :, None]
    keys = torch.arange(past + n, device=dev)
    band = (keys[None, :] >= steps[:, None]) & (keys[None, :] <= steps[:, None] + past)  # [n, past + n]
    started = (pos[:, None] - past + keys) >= 0  # [B, past + n]
    return emb.cos().to(dtype), emb.sin().to(dtype), (band[None] & started[:, None])[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        q_dim, kv_dim = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, q_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_dim, cfg.hidden_size, bias=cfg.attention_bias)
        self.kernels = Kernels()

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, state: StateRows, layer: int
    ) -> Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim)
        q, k = self.kernels.fuse(pointwise.rotate_pair)(q, k, cos, sin)
        if self.kernels.fused_window and x.is_cuda:
            from voicewire.engine.kernels import decoder_window  # Triton, which CUDA builds of torch carry

            if decoder_window.takes(n, self.heads, self.kv_heads, self.head_dim):
                keys, values = state.windows(layer)
                return self.o_proj(decoder_window.attend(q, k, v, keys, values, state.index, state.pos))
        q = q.transpose(1, 2)
        past_k, past_v = state.window(layer)
        # [B, kv_heads, window - 1 + n, head_dim]: the carried window, then this chunk.
        k_all = torch.cat([past_k, k.transpose(1, 2)], dim=2)
        v_all = torch.cat([past_v, v.transpose(1, 2)], dim=2)
        window = past_k.shape[2]
        state.set_window(layer, k_all[:, :, -window:], v_all[:, :, -window:])
        if self.heads != self.kv_heads:
            k_all = k_all.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v_all = v_all.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, state: StateRows, layer: int
    ) -> Tensor:
        attended = self.self_attn(self.input_layernorm(x), cos, sin, mask, state, layer)
        x = self.self_attn_layer_scale(x, attended)
        return self.mlp_layer_scale(x, self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.kernels = Kernels()

    def forward(self, x: Tensor, state: StateRows) -> Tensor:
        # x [B, n, latent]; positions continue from state.pos per row.
        cfg = self.cfg
        cos, sin, mask = self.kernels.fuse(window_rope_and_mask)(
            state.pos, x.shape[1], cfg.sliding_window - 1, cfg.head_dim, cfg.rope_theta, x.dtype
        )
        h = self.input_proj(x)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, mask, state, i)
        return self.output_proj(self.norm(h))


# --- the decoder ----------------------------------------------------------------------------------


class CodecDecoder(nn.Module):
    """Codes `[B, T, num_quantizers]` (int64, 0..codebook_size-1) -> samples `[B, T * 1920]` in ±1."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.quantizer = Quantizer(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = Transformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList(
                [CausalTransConv(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)]
            )
            for r in cfg.upsampling_ratios
        )
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [
                CausalConv(cfg.latent_dim, cfg.decoder_dim, 7),
                *(DecoderBlock(dims[i], dims[i + 1], r) for i, r in enumerate(cfg.upsample_rates)),
                SnakeBeta(dims[-1]),
                CausalConv(dims[-1], 1, 7),
            ]
        )
        self._contexts: list[CausalConv | CausalTransConv] = []
        for m in self.modules():
            if isinstance(m, CausalConv | CausalTransConv) and m.context > 0:
                m.slot = len(self._contexts)
                self._contexts.append(m)

    def prepare(self) -> None:
        """Derive the inference forms of the loaded weights, in place, on their device: the
        quantizer's folded table, and channels-last conv weights, as the activations are, so no
        conv converts its weight."""
        self.quantizer.fold()
        for m in self.modules():
            if isinstance(m, CausalConv | CausalTransConv):
                m.packed = None  # packed again from the weights as they are now
            if isinstance(m, nn.Conv1d | nn.ConvTranspose1d) and m.groups == 1:
                m.weight.data = m.weight.data.mT.contiguous().mT

    def new_state(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> CodecDecoderState:
        """Zeroed context for `batch` stream slots."""
        cfg = self.cfg
        shapes = [(m.context, m.conv.in_channels) for m in self._contexts]
        conv_rows = torch.zeros(batch, sum(c * ch for c, ch in shapes), device=device, dtype=dtype)
        shape = (batch, cfg.num_key_value_heads, cfg.sliding_window - 1, cfg.head_dim)
        keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        pos = torch.zeros(batch, device=device, dtype=torch.int64)
        return CodecDecoderState(conv_rows, conv_views(conv_rows, shapes), keys, values, pos)

    def decode_step(self, codes: Tensor, state: CodecDecoderState, rows: Tensor | None = None) -> Tensor:
        """Decode the next `n` frames `[B, n, Q]` of the streams in `rows` (int64 [B]; default: all
        of the state's rows, in order); returns their samples `[B, n * 1920]`."""
        if rows is None:
            rows = torch.arange(state.pos.shape[0], device=state.pos.device)
        part = state.rows(rows)
        h = self.quantizer(codes)  # [B, n, codebook_dim], time-major from here on
        h = self.pre_conv(h, part)
        h = self.pre_transformer(h, part)  # [B, n, latent]
        for trans_conv, block in self.upsample:
            h = block(trans_conv(h, part), part)
        first, *blocks, act, last = self.decoder
        h = first(h, part)
        for block in blocks:
            h = block(h, part)
        h = last(h, part, act)  # [B, n * 1920, 1]
        part.advance(codes.shape[1])
        return h[..., 0].clamp(-1.0, 1.0)

    def forward(self, codes: Tensor) -> Tensor:
        """Full decode of `[B, T, Q]` codes from the stream start: `[B, T * 1920]`."""
        state = self.new_state(codes.shape[0], codes.device, self.pre_conv.conv.weight.dtype)
        return self.decode_step(codes, state)


def random_init_(module: CodecDecoder, gen: torch.Generator) -> None:
    """Scaled random weights so the audio is loud enough and depends on the codes: with N(0, 0.02)
    weights and zero codebooks it would be near-silent, and the same for any codes."""

    def normal(t: Tensor, std: float, mean: float = 0.0) -> None:
        t.copy_(torch.randn(t.shape, generator=gen) * std + mean)

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                for weight in weight_parts(m):
                    normal(weight, (weight[0].numel()) ** -0.5)
            elif isinstance(m, nn.Conv1d):
                normal(m.weight, (m.weight[0].numel()) ** -0.5)
            elif isinstance(m, nn.ConvTranspose1d):
                # Each output sample sums c_in * kernel / stride products.
                normal(m.weight, (m.in_channels * m.kernel_size[0] / m.stride[0]) ** -0.5)
            elif isinstance(m, Codebook):
                normal(m.embedding_sum, 1.0)
                m.cluster_usage.copy_(torch.rand(m.cluster_usage.shape, generator=gen) + 0.5)
                continue
            elif isinstance(m, SnakeBeta):
                # Frequencies around 1 and sin² terms around 0.5: non-linear, but gentle enough
                # that float32 rounding does not grow through the 24 activations.
                normal(m.alpha, 0.2)
                normal(m.beta, 0.2, 0.7)
            elif isinstance(m, RMSNorm | nn.LayerNorm):
                normal(m.weight, 0.1, 1.0)
            elif isinstance(m, LayerScale):
                normal(m.scale, 0.1, 0.5)
            elif isinstance(m, ConvNeXtBlock):
                normal(m.gamma, 0.1, 0.5)
            bias = getattr(m, "bias", None)
            if isinstance(bias, nn.Parameter):
                normal(bias, 0.05)
        # Parents come before their children in modules(), so rescale in a second pass.
        for m in module.modules():
            if isinstance(m, ResidualGroup):
                # A sum of `count` unit-variance entries; bring it back to unit variance.
                m.output_proj.weight.mul_(len(m.vq.layers) ** -0.5)
            elif isinstance(m, ResidualUnit):
                # Three residual units per block would otherwise grow the signal ~3x per block.
                m.conv2.conv.weight.mul_(0.3)
        # Keep the output mostly inside ±1 rather than clipped.
        module.decoder[-1].conv.weight.mul_(0.15)


def load_codec_decoder(
    speech_tokenizer_dir: Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> CodecDecoder:
    """The codec decoder of a checkpoint's speech_tokenizer/ folder, loaded strictly."""
    folder = Path(speech_tokenizer_dir)
    cfg = read_json(folder / "config.json")
    if "decoder_config" not in cfg:
        raise CheckpointError(f"{folder / 'config.json'} has no decoder_config")
    decoder = CodecDecoder(CodecDecoderConfig.from_dict(cfg["decoder_config"]))
    tensors = read_safetensors(folder / "model.safetensors")
    load_into(decoder, take_prefix(tensors, "decoder"), f"{folder / 'model.safetensors'} (decoder.*)")
    log.debug("loaded the codec decoder from %s", folder)
    decoder = decoder.to(device=device, dtype=dtype).eval()
    decoder.prepare()
    return decoder
