"""The codec decoder's SnakeBeta activation in one Triton kernel (CUDA, `Kernels.fused_snake`).

A decoder pass runs 29 activations over its largest tensors ([B, T, C] with T up to 1920 per
frame), each maybe after the previous conv's bias and before its own conv's carried context.
Compiled by inductor for dynamic shapes, each was one kernel, at 1.3-1.7 TB/s on an H100: it takes
e^alpha and 1/e^beta for every element, finds an element's row and time by division by runtime
sizes where it writes the context too, and takes libdevice's precise sine (about a hundred
instructions, with a slow path for large arguments).

Here a program owns a (time, channel) tile of one row: it takes the per-channel factors once for
its channels and reads its addresses from the grid, with the channel count a compile-time
constant. In half precision it takes the GPU's fast sine (`sin.approx`, libdevice's `fast_sinf`),
whose error is far below the one rounding to bfloat16 at the store; float32 keeps the precise one.
The 29 activations of a pass of 64 rows x 8 frames on an H100: 3.69 ms as inductor compiled them,
2.90 here with the precise sine, 2.17 with the fast one (2.3-2.8 TB/s; `python
scripts/bench_fused_layer.py snake`, docs/log/2026-11.md, "The activation kernel"). The math
is `pointwise.snake_beta`'s, in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.language.extra import libdevice

TILE = 4096  # elements a program writes: enough per program to stream, small enough for any pass


@triton.jit
def snake_tile(x, log_alpha_ptr, log_beta_ptr, cs, FAST_SIN: tl.constexpr):
    """`pointwise.snake_beta` of a float32 tile x [rows, channels cs] (cs within the channels):
    the one place its math is written for the kernels (this one, and `fused_conv.unit`'s)."""
    alpha = tl.exp(tl.load(log_alpha_ptr + cs).to(tl.float32))
    inv_beta = 1.0 / (tl.exp(tl.load(log_beta_ptr + cs).to(tl.float32)) + 1e-9)
    if FAST_SIN:
        wave = libdevice.fast_sinf(x * alpha[None, :])
    else:
        wave = tl.sin(x * alpha[None, :])
    return x + inv_beta[None, :] * (wave * wave)


@triton.jit
def _snake_kernel(
    x_ptr,
    context_ptr,
    log_alpha_ptr,
    log_beta_ptr,
    bias_ptr,
    out_ptr,
    tail_ptr,
    n_out,
    x_row_stride,
    x_time_stride,
    context_row_stride,
    context_time_stride,
    tail_row_stride,
    tail_time_stride,
    C: tl.constexpr,
    CONTEXT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
    FAST_SIN: tl.constexpr,
):
    """out[b, t] = context[b, t] for t < CONTEXT, else snake(x[b, t - CONTEXT] (+ bias)); out is
    contiguous [B, n_out, C]. With HAS_TAIL, out's last CONTEXT times go to tail [B, CONTEXT, C]
    too (the conv's next context). Grid: (time blocks, channel blocks, rows)."""
    row = tl.program_id(2).to(tl.int64)
    ts = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_out = ts < n_out
    in_x = in_out & (ts >= CONTEXT)
    x_at = row * x_row_stride + (ts - CONTEXT)[:, None] * x_time_stride + cs[None, :]
    x = tl.load(x_ptr + x_at, mask=in_x[:, None], other=0.0).to(tl.float32)
    if HAS_BIAS:
        x += tl.load(bias_ptr + cs).to(tl.float32)[None, :]
    y = snake_tile(x, log_alpha_ptr, log_beta_ptr, cs, FAST_SIN)
    if CONTEXT > 0:
        in_context = ts < CONTEXT
        context_at = row * context_row_stride + ts[:, None] * context_time_stride + cs[None, :]
        carried = tl.load(context_ptr + context_at, mask=in_context[:, None], other=0.0)
        y = tl.where(in_context[:, None], carried.to(tl.float32), y)
    out_at = (row * n_out + ts[:, None]) * C + cs[None, :]
    tl.store(out_ptr + out_at, y.to(out_ptr.dtype.element_ty), mask=in_out[:, None])
    if HAS_TAIL:
        tail_start = n_out - CONTEXT
        in_tail = in_out & (ts >= tail_start)
        tail_at = row * tail_row_stride + (ts - tail_start)[:, None] * tail_time_stride + cs[None, :]
        tl.store(tail_ptr + tail_at, y.to(tail_ptr.dtype.element_ty), mask=in_tail[:, None])


# Triton's interpreter (TRITON_INTERPRET, read by Triton as it decorated the kernel) has no fast
# sine; a kernel it runs is not a compiled JITFunction.
INTERPRETED = not isinstance(_snake_kernel, triton.runtime.JITFunction)


def takes_fast_sine(dtype: torch.dtype) -> bool:
    """Whether a kernel writing `dtype` takes the fast sine: in half precision, where its error is
    far below the rounding at the store; never in float32 or in the interpreter, which has none."""
    return dtype != torch.float32 and not INTERPRETED


def _channel_block(channels: int) -> int:
    """The largest power of two up to 128 that divides `channels` (the decoder's are 3 * 2^k), so
    every program's channels are whole and need no mask."""
    block = 128
    while channels % block:
        block //= 2
    return block


def snake_beta(
    x: Tensor,
    log_alpha: Tensor,
    log_beta: Tensor,
    bias: Tensor | None = None,
    context: Tensor | None = None,
    fast_sine: bool | None = None,
    tail: Tensor | None = None,
) -> Tensor:
    """`pointwise.snake_beta` of x [B, T, C] (+ bias [C]), after `context` [B, c, C] along time if
    given (`pointwise.snake_beta_after`): a new contiguous [B, c + T, C]. With `tail` [B, c, C],
    the output's last c times are written there too, in the same pass (a conv's next context,
    `codec_decoder.StateRows`). x, context and tail need a contiguous channel dim; their rows and
    times may be strided. `fast_sine`: None takes the fast sine in half precision and the precise
    one in float32 (a benchmark compares both)."""
    b, t, c = x.shape
    if any(v is not None and v.stride(2) != 1 for v in (x, context, tail)):
        raise ValueError("snake_beta needs x, context and tail with a contiguous channel dim")
    if log_alpha.shape != (c,) or log_beta.shape != (c,) or (bias is not None and bias.shape != (c,)):
        raise ValueError(f"snake_beta: alpha, beta and bias must be [{c}] for x {tuple(x.shape)}")
    if context is not None and (context.shape[0] != b or context.shape[2] != c):
        raise ValueError(f"snake_beta: context {tuple(context.shape)} does not match x {tuple(x.shape)}")
    n_context = context.shape[1] if context is not None else 0
    if tail is not None and (context is None or tail.shape != context.shape):
        raise ValueError(f"snake_beta: tail {tuple(tail.shape)} must have the context's shape")
    n_out = n_context + t
    out = torch.empty(b, n_out, c, device=x.device, dtype=x.dtype)
    if out.numel() == 0:
        return out
    block_c = _channel_block(c)
    # Two tile shapes per width: few compiled variants; short passes still spread over the SMs.
    tile = TILE if b * n_out * c >= 64 * TILE else TILE // 8
    block_t = tile // block_c
    grid = (triton.cdiv(n_out, block_t), c // block_c, b)
    _snake_kernel[grid](
        x,
        context if context is not None else x,
        log_alpha,
        log_beta,
        bias if bias is not None else log_alpha,
        out,
        tail if tail is not None else out,
        n_out,
        x.stride(0),
        x.stride(1),
        context.stride(0) if context is not None else 0,
        context.stride(1) if context is not None else 0,
        tail.stride(0) if tail is not None else 0,
        tail.stride(1) if tail is not None else 0,
        C=c,
        CONTEXT=n_context,
        HAS_BIAS=bias is not None,
        HAS_TAIL=tail is not None,
        BLOCK_T=block_t,
        BLOCK_C=block_c,
        FAST_SIN=takes_fast_sine(x.dtype) if fast_sine is None else fast_sine and not INTERPRETED,
        num_warps=4,
    )
    return out
