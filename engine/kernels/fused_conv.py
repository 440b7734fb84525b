"""The codec decoder's dense convolutions as one Triton implicit GEMM each (CUDA, `Kernels.fused_conv`).

Every dense conv of the decoder reads a time-major input [B, context + T, C_in] (the carried
context, then the new frames, as `fused_snake` writes them) and writes [B, T, C_out]:

    out[b, t] = sum over taps k of  x[b, t + k * dilation] @ W_k   (+ bias) (+ residual[b, t])

In the time-major layout a tap's input tile is a block of whole rows shifted by k * dilation, so
one GEMM over the taps times the input channels needs no unfolded copy. The transposed convs
(kernel 2s or s, stride s) are the same GEMM: output sample n*s + r takes input frames n and n-1
through kernel columns r and r + s, so they are a two-tap (one-tap) conv whose s*C_out outputs
per frame are the s samples of [B, T*s, C_out] (`pack_transposed`).

cuDNN ran these convs at about 180-190 TFLOP/s of an H200's ~990 bf16 (docs/log/2026-11.md,
"Where a frame's GPU time goes"), and its bias and the residual adds were passes of their own over
the decoder's largest tensors; here both are the GEMM's epilogue. Accumulation and the epilogue
are float32; the output is rounded once, to the input's dtype. `unit` runs a whole residual unit
of the narrowest block (dilated conv, activation, 1x1 conv and residual) as one kernel
(`Kernels.fused_unit`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from voicewire.engine.kernels import fused_snake


@dataclass(frozen=True)
class ConvWeight:
    """A conv's weight packed for the kernel: [taps * C_in, C_out] (tap-major, then input
    channel), with the tap spacing in input frames, and its bias [C_out] or None."""

    weight: Tensor
    bias: Tensor | None
    taps: int
    dilation: int

    @property
    def in_channels(self) -> int:
        return self.weight.shape[0] // self.taps

    @property
    def out_channels(self) -> int:
        return self.weight.shape[1]

    @property
    def context(self) -> int:
        """Input frames before the first output's: (taps - 1) * dilation."""
        return (self.taps - 1) * self.dilation


def pack(weight: Tensor, bias: Tensor | None, dilation: int) -> ConvWeight:
    """A Conv1d's weight [C_out, C_in, K] (stride 1) for `conv`. Detached: a module's parameters
    packed outside inference mode would otherwise keep autograd's graph of the copy."""
    c_out, c_in, taps = weight.shape
    packed = weight.detach().permute(2, 1, 0).reshape(taps * c_in, c_out).contiguous()
    return ConvWeight(packed, None if bias is None else bias.detach().contiguous(), taps, dilation)


def pack_transposed(weight: Tensor, bias: Tensor | None, stride: int) -> ConvWeight:
    """A ConvTranspose1d's weight [C_in, C_out, K] (stride `stride`, K = stride or 2 * stride) as
    a conv with stride * C_out outputs, output column r * C_out + c being sample r of the frame's
    stride samples, channel c. With K = 2 * stride it has two taps: tap 0 reads the frame before
    (kernel columns stride..2*stride-1), tap 1 the frame itself (columns 0..stride-1); with
    K = stride, one. Detached, as `pack`."""
    weight = weight.detach()
    bias = None if bias is None else bias.detach()
    c_in, c_out, kernel = weight.shape
    if kernel not in (stride, 2 * stride):
        raise ValueError(f"pack_transposed: kernel {kernel} is neither the stride {stride} nor twice it")
    columns = weight.permute(0, 2, 1)  # [C_in, K, C_out]
    taps = [columns[:, stride:], columns[:, :stride]] if kernel == 2 * stride else [columns]
    packed = torch.stack(taps).reshape(len(taps) * c_in, stride * c_out).contiguous()
    return ConvWeight(packed, None if bias is None else bias.repeat(stride).contiguous(), len(taps), 1)


MIN_BLOCK_K = 16  # the narrowest input-channel step a tensor-core dot takes


@dataclass(frozen=True)
class Tiles:
    """One launch's tile shape: output rows, output channels, input channels per step."""

    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int


def tiles(w: ConvWeight) -> Tiles:
    """The tile for `w`, from a sweep of each decoder conv at 256 rows x 8 frames on an H200
    (`python scripts/bench_fused_layer.py conv-sweep`; docs/log/2026-11.md, "The decoder's convs in
    Triton"): wide tiles where there are many output channels; narrower ones
    for the 1x1 convs, which read more than they compute; 32 input channels a step for 96."""
    block_k = 64
    while w.in_channels % block_k:
        block_k //= 2
    if w.out_channels <= 128:
        return Tiles(128, 128, block_k, 8, 4)
    if w.taps == 1 and w.out_channels <= 192:
        return Tiles(128, 64, block_k, 4, 3)
    if w.taps == 1 and w.out_channels <= 384:
        return Tiles(64, 128, block_k, 4, 3)
    if w.out_channels <= 384:
        return Tiles(128, 128, block_k, 8, 3)
    return Tiles(128, 256, block_k, 8, 3)


def fills(rows: int, w: ConvWeight, device: torch.device, sms: int | None = None) -> bool:
    """Whether `rows` output rows (B * T) of `w` make at least one tile per streaming processor of
    `device` (or per `sms` processors). Fewer leave most of the GPU idle, where cuDNN's kernels
    (which split the input channels) took less time: a decoder pass of 1 row x 1 frame took
    1.19 ms with this kernel everywhere, 1.11 with cuDNN's."""
    at = tiles(w)
    return triton.cdiv(rows, at.block_m) * triton.cdiv(w.out_channels, at.block_n) >= (
        sms or processors(device)
    )


@functools.cache
def processors(device: torch.device) -> int:
    """The streaming processors of a CUDA device (one for any other: Triton's interpreter)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


@triton.jit
def _taps_dot(
    x_ptr,
    w_ptr,
    a_at,
    x_time_stride,
    dilation,
    ns,
    ks,
    in_m,
    in_n,
    C_IN: tl.constexpr,
    C_OUT: tl.constexpr,
    TAPS: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """The GEMM both kernels share: float32 [BLOCK_M, BLOCK_N], the sum over the taps and the input
    channels of x's rows at `a_at` (tap 0's frame), a tap `dilation` frames further each, times the
    packed weight's rows [TAPS * C_IN, C_OUT] at the output channels `ns`, `ks` a step's
    BLOCK_K input channels (made by the caller where it always was: the compiled code stays the
    same)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    STEPS: tl.constexpr = C_IN // BLOCK_K
    for i in range(TAPS * STEPS):
        tap = i // STEPS
        c = (i % STEPS) * BLOCK_K + ks
        a = tl.load(x_ptr + (a_at + tap * dilation * x_time_stride)[:, None] + c[None, :], mask=in_m[:, None])
        w = tl.load(w_ptr + (tap * C_IN + c)[:, None] * C_OUT + ns[None, :], mask=in_n[None, :])
        if IEEE:
            acc = tl.dot(a, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def _finish(
    acc,
    bias_ptr,
    res_ptr,
    out_ptr,
    ms,
    ns,
    in_m,
    in_n,
    T,
    res_row_stride,
    res_time_stride,
    C_OUT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """The epilogue both kernels share: the float32 tile acc of output rows `ms` (b * T + t) and
    channels `ns`, plus the bias and the residual's rows where given, stored to the contiguous
    out [M, C_OUT] in its dtype."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ns, mask=in_n).to(tl.float32)[None, :]
    both = in_m[:, None] & in_n[None, :]
    if HAS_RES:
        res_at = (ms // T).to(tl.int64) * res_row_stride + (ms % T).to(tl.int64) * res_time_stride
        acc += tl.load(res_ptr + res_at[:, None] + ns[None, :], mask=both).to(tl.float32)
    out_at = ms.to(tl.int64)[:, None] * C_OUT + ns[None, :]
    tl.store(out_ptr + out_at, acc.to(out_ptr.dtype.element_ty), mask=both)


@triton.jit
def _conv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    res_ptr,
    out_ptr,
    M,
    T,
    x_row_stride,
    x_time_stride,
    res_row_stride,
    res_time_stride,
    dilation,
    C_IN: tl.constexpr,
    C_OUT: tl.constexpr,
    TAPS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RES: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """out[m] for the output rows m = b * T + t of one tile; out is contiguous [M, C_OUT]."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    # Groups of GROUP_M row tiles sweep the output channels together, so the input rows they share
    # stay in L2 while every channel tile reads them.
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % size_m
    pid_n = (pid % (GROUP_M * tiles_n)) // size_m

    ms = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    in_m = ms < M
    in_n = ns < C_OUT
    row = (ms // T).to(tl.int64)
    a_at = row * x_row_stride + (ms % T).to(tl.int64) * x_time_stride  # tap 0's input frame
    acc = _taps_dot(
        x_ptr,
        w_ptr,
        a_at,
        x_time_stride,
        dilation,
        ns,
        ks,
        in_m,
        in_n,
        C_IN,
        C_OUT,
        TAPS,
        IEEE,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )
    _finish(
        acc,
        bias_ptr,
        res_ptr,
        out_ptr,
        ms,
        ns,
        in_m,
        in_n,
        T,
        res_row_stride,
        res_time_stride,
        C_OUT,
        HAS_BIAS,
        HAS_RES,
    )


def conv(
    x: Tensor,
    w: ConvWeight,
    residual: Tensor | None = None,
    with_bias: bool = True,
    at: Tiles | None = None,
) -> Tensor:
    """The conv `w` over time-major x [B, w.context + T, C_in] (context first): a new contiguous
    [B, T, C_out], plus `residual` [B, T, C_out] if given. `with_bias=False` leaves out the bias
    (for the caller's next pass to add). x and residual need a contiguous channel dim; their rows
    and times may be strided. `at`: the tile, in place of `tiles`' (benchmarks).

    The activation before a 1x1 conv stays a pass of its own (`fused_snake`): made in this
    kernel's loads instead, it took a 256 x 8 decoder pass from 39.4 to 40.4 ms on an H200 (the
    convs 4.8 ms longer, the activations 2.4 ms shorter: the loads no longer overlap the tensor
    cores' work). Nor is the activation after a conv (session 57's `conv_snake`): as this kernel's
    epilogue, once per output, it took a 256 x 8 pass from 35.3 to 36.8 ms (the convs it ended
    4.5 ms longer, the activations 2.5 ms shorter; docs/log/2026-11.md, session 58)."""
    b, length, c_in = x.shape
    t = length - w.context
    if c_in != w.in_channels or x.stride(2) != 1:
        raise ValueError(f"conv: x {tuple(x.shape)} needs {w.in_channels} contiguous channels")
    if c_in % MIN_BLOCK_K:
        raise ValueError(f"conv: {c_in} input channels are not a multiple of {MIN_BLOCK_K}")
    if t < 0:
        raise ValueError(f"conv: x has {length} frames, fewer than the context {w.context}")
    if residual is not None and (residual.shape != (b, t, w.out_channels) or residual.stride(2) != 1):
        raise ValueError(f"conv: residual {tuple(residual.shape)} is not [{b}, {t}, {w.out_channels}]")
    out = torch.empty(b, t, w.out_channels, device=x.device, dtype=x.dtype)
    rows = b * t
    if rows == 0:
        return out
    at = at or tiles(w)
    grid = (triton.cdiv(rows, at.block_m) * triton.cdiv(w.out_channels, at.block_n),)
    bias = w.bias if with_bias else None
    _conv_kernel[grid](
        x,
        w.weight,
        bias if bias is not None else w.weight,
        residual if residual is not None else x,
        out,
        rows,
        t,
        x.stride(0),
        x.stride(1),
        residual.stride(0) if residual is not None else 0,
        residual.stride(1) if residual is not None else 0,
        w.dilation,
        C_IN=c_in,
        C_OUT=w.out_channels,
        TAPS=w.taps,
        HAS_BIAS=bias is not None,
        HAS_RES=residual is not None,
        IEEE=x.dtype == torch.float32,
        BLOCK_M=at.block_m,
        BLOCK_N=at.block_n,
        BLOCK_K=at.block_k,
        GROUP_M=8,
        num_warps=at.warps,
        num_stages=at.stages,
    )
    return out


# Residual units this wide take `unit`: one tile then holds every output channel, and the 1x1
# conv's weight (padded to the tile) is a 32 KiB operand of the second dot.
UNIT_CHANNELS = 128


@dataclass(frozen=True)
class Snake:
    """A SnakeBeta as `unit` applies it: its per-channel log alpha and log beta [C]."""

    log_alpha: Tensor
    log_beta: Tensor


@triton.jit
def _unit_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    log_alpha_ptr,
    log_beta_ptr,
    w2_ptr,
    bias2_ptr,
    res_ptr,
    out_ptr,
    M,
    T,
    x_row_stride,
    x_time_stride,
    res_row_stride,
    res_time_stride,
    dilation,
    C: tl.constexpr,
    TAPS: tl.constexpr,
    FAST_SIN: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One residual unit's rows m = b * T + t: out = res + conv2(act(conv1(x) + bias)) + bias2,
    conv1 over TAPS taps of the activated input x (context first), conv2 a 1x1; the tile holds
    every channel (BLOCK_C >= C), so conv1's output never leaves the program."""
    ms = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ns = tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    in_m = ms < M
    in_n = ns < C
    row = (ms // T).to(tl.int64)
    a_at = row * x_row_stride + (ms % T).to(tl.int64) * x_time_stride
    acc = _taps_dot(
        x_ptr,
        w_ptr,
        a_at,
        x_time_stride,
        dilation,
        ns,
        ks,
        in_m,
        in_n,
        C,
        C,
        TAPS,
        IEEE,
        BLOCK_M,
        BLOCK_C,
        BLOCK_K,
    )
    acc += tl.load(bias_ptr + ns, mask=in_n).to(tl.float32)[None, :]
    # Channels past C read channel 0's factors and are zeroed: they meet zero rows of w2 anyway.
    h = fused_snake.snake_tile(acc, log_alpha_ptr, log_beta_ptr, tl.where(in_n, ns, 0), FAST_SIN)
    h = tl.where(in_n[None, :], h, 0.0).to(x_ptr.dtype.element_ty)  # rounded as conv2's input would be
    both_c = in_n[:, None] & in_n[None, :]
    w2 = tl.load(w2_ptr + ns[:, None] * C + ns[None, :], mask=both_c, other=0.0)
    if IEEE:
        out = tl.dot(h, w2, input_precision="ieee")
    else:
        out = tl.dot(h, w2)
    _finish(
        out,
        bias2_ptr,
        res_ptr,
        out_ptr,
        ms,
        ns,
        in_m,
        in_n,
        T,
        res_row_stride,
        res_time_stride,
        C,
        True,
        True,
    )


def unit(x: Tensor, w1: ConvWeight, act: Snake, w2: ConvWeight, residual: Tensor) -> Tensor:
    """A residual unit of C <= UNIT_CHANNELS channels in one kernel: residual + w2(act(w1(x))),
    with both convs' biases, x [B, w1.context + T, C] the activated input after its context (as
    `fused_snake` writes it) and residual [B, T, C]; returns a new contiguous [B, T, C].

    The unfused unit writes conv1's output, reads it for the activation, writes that and reads it
    again for the 1x1 conv: at 96 channels, where the tensors are longest, that 1x1 conv ran at
    about 2 TB/s and 65 TFLOP/s (docs/log/2026-11.md, session 58). Here the tile of conv1's output
    stays in registers for the activation and the 1x1 conv."""
    b, length, c = x.shape
    t = length - w1.context
    if not (w1.in_channels == w1.out_channels == w2.in_channels == w2.out_channels == c) or w2.taps != 1:
        raise ValueError(f"unit: x has {c} channels; the convs must be {c} -> {c}, the second 1x1")
    if c > UNIT_CHANNELS or c % MIN_BLOCK_K or x.stride(2) != 1:
        raise ValueError(
            f"unit: x needs contiguous channels, a multiple of {MIN_BLOCK_K} up to {UNIT_CHANNELS}"
        )
    if w1.bias is None or w2.bias is None:
        raise ValueError("unit: both convs need their bias")
    if t < 0:
        raise ValueError(f"unit: x has {length} frames, fewer than the context {w1.context}")
    if residual.shape != (b, t, c) or residual.stride(2) != 1:
        raise ValueError(f"unit: residual {tuple(residual.shape)} is not [{b}, {t}, {c}]")
    if not (
        act.log_alpha.shape == act.log_beta.shape == (c,)
        and act.log_alpha.is_contiguous()
        and act.log_beta.is_contiguous()
    ):
        raise ValueError(f"unit: the activation's alpha and beta must be contiguous [{c}]")
    out = torch.empty(b, t, c, device=x.device, dtype=x.dtype)
    rows = b * t
    if rows == 0:
        return out
    at = tiles(w1)
    _unit_kernel[(triton.cdiv(rows, at.block_m),)](
        x,
        w1.weight,
        w1.bias,
        act.log_alpha,
        act.log_beta,
        w2.weight,
        w2.bias,
        residual,
        out,
        rows,
        t,
        x.stride(0),
        x.stride(1),
        residual.stride(0),
        residual.stride(1),
        w1.dilation,
        C=c,
        TAPS=w1.taps,
        FAST_SIN=fused_snake.takes_fast_sine(x.dtype),
        IEEE=x.dtype == torch.float32,
        BLOCK_M=at.block_m,
        BLOCK_C=triton.next_power_of_2(c),
        BLOCK_K=at.block_k,
        num_warps=at.warps,
        num_stages=at.stages,
    )
    return out
