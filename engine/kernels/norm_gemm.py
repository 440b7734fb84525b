"""A decoder layer's normed projections at larger batches as Triton GEMMs (CUDA, `Kernels.norm_gemm`).

From 3 rows on a layer runs cuBLAS's GEMMs (`fused_layer.MAX_ROWS`), with its two residual sums
and norms and its SiLU(gate) * up as kernels of their own between them: a layer is eight kernels,
and the frame step's 103 layer passes about 965, which took 6.4 ms at 192 rows where the GEMMs'
arithmetic and weight reads need about 1.5 (docs/log/2026-11.md, session 49). Here the residual
sum and the RMSNorm run in the q/k/v and gate/up GEMMs' mainloops, and SiLU(gate) * up in the
gate/up GEMM's epilogue, as `fused_layer.gemv` does for a few rows, so a layer is five kernels:

1. residual sum + RMSNorm + the q/k/v projection,
2. the attention kernel (`fused_layer.attend`, or the unfused attention where it does not apply),
3. the output projection (cuBLAS),
4. residual sum + RMSNorm + the gate/up projection with SiLU(gate) * up in its epilogue,
5. the down projection (cuBLAS).

The norm's 1/rms is a factor per row: the mainloop scales each tile of the rows by the norm's
weight alone, sums the rows' squares as it goes, and the epilogue scales the sums by 1/rms. So the
rows are read once, but they round to the model's dtype before 1/rms where the unfused layer rounds
after it: the projections differ from the unfused ones within a step of that dtype, as the GEMV's
do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl
from torch import Tensor

from voicewire.engine.kernels.pdl import launch_options

if TYPE_CHECKING:
    from voicewire.engine.model.layers import DecoderLayer


@triton.jit
def _norm_gemm_kernel(
    x_ptr,
    delta_ptr,
    sum_ptr,
    norm_ptr,
    w_ptr,
    out_ptr,
    m,
    n,
    eps,
    K: tl.constexpr,
    HAS_DELTA: tl.constexpr,
    GATED: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """out[m, n] = RMSNorm(h)[m, :] @ w[n, :], h = x (+ delta, written to sum by the first column
    block). GATED: w holds gate rows then up rows, and out = SiLU(h @ gate) * (h @ up). The first
    grid axis walks the row blocks, so the programs that read one block of weights run together."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    dtype = x_ptr.dtype.element_ty
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < m
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    ks = tl.arange(0, BLOCK_K)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()

    squares = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = k0 + ks < K
        at = rows[:, None] * K + (k0 + ks)[None, :]
        ok = row_ok[:, None] & k_ok[None, :]
        h = tl.load(x_ptr + at, mask=ok, other=0.0)
        if HAS_DELTA:
            # The residual sum rounds to the model's dtype, as the unfused sum does.
            h = (h.to(tl.float32) + tl.load(delta_ptr + at, mask=ok, other=0.0).to(tl.float32)).to(dtype)
            if pid_n == 0:
                tl.store(sum_ptr + at, h, mask=ok)
        h32 = h.to(tl.float32)
        squares += tl.sum(h32 * h32, axis=1)
        a = (h32 * tl.load(norm_ptr + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]).to(dtype)
        w_at = cols[None, :] * K + (k0 + ks)[:, None]
        w_ok = col_ok[None, :] & k_ok[:, None]
        w = tl.load(w_ptr + w_at, mask=w_ok, other=0.0)
        if IEEE:  # float32 models: no TF32 products, as in the unfused matmul
            acc += tl.dot(a, w, input_precision="ieee")
        else:
            acc += tl.dot(a, w)
        if GATED:
            up = tl.load(w_ptr + n * K + w_at, mask=w_ok, other=0.0)
            if IEEE:
                acc_up += tl.dot(a, up, input_precision="ieee")
            else:
                acc_up += tl.dot(a, up)

    inv = 1.0 / tl.sqrt(squares / K + eps)
    acc = acc * inv[:, None]
    if GATED:
        # Gate and up round to the model's dtype first, as the unfused projection's outputs do.
        gate = acc.to(dtype).to(tl.float32)
        acc = gate * tl.sigmoid(gate) * (acc_up * inv[:, None]).to(dtype).to(tl.float32)
    out_at = rows[:, None] * n + cols[None, :]
    tl.store(out_ptr + out_at, acc.to(dtype), mask=row_ok[:, None] & col_ok[None, :])


@dataclass(frozen=True)
class Tiles:
    """A launch of the kernel: its block of rows, of output columns and of K; warps; stages."""

    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int


def tiles(m: int, gated: bool) -> Tiles:
    """The launch for m rows. Not yet timed on a GPU: blocks of 64 rows up to 512 (a frame step's
    128-256, in 2-4 row blocks by 32-48 column blocks), of 128 rows above (prefills); the gated
    projection keeps two accumulators, so half as many columns."""
    block_m = 64 if m <= 512 else 128
    block_n = 64 if gated else 128
    return Tiles(block_m, block_n, 64, warps=4 if block_m == 64 else 8, stages=3)


def norm_gemm(
    x: Tensor,
    weight: Tensor,
    norm: Tensor,
    eps: float,
    delta: Tensor | None = None,
    gated: bool = False,
    pdl: bool = False,
    launch: Tiles | None = None,
) -> tuple[Tensor, Tensor | None]:
    """x [..., K] (+ delta), RMS-normed with `norm` [K], times weight [N, K]^T -> (out [..., N], or
    [..., N / 2] with `gated`: SiLU(gate) * up of weight's gate rows then up rows; the residual
    sum x + delta, or None). `pdl`: launched with programmatic dependent launch (engine.pdl).
    `launch`: `tiles`' choice unless given."""
    k = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k).contiguous()
    m = x2.shape[0]
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    if weight.shape[1] != k or (gated and weight.shape[0] % 2) or norm.shape != (k,):
        raise ValueError(
            f"weight {tuple(weight.shape)} and norm {tuple(norm.shape)} do not fit input width {k} "
            f"(gated={gated})"
        )
    if not weight.is_contiguous():
        raise ValueError("the weight must be contiguous")
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    total = torch.empty_like(x2) if delta is not None else None
    launch = launch or tiles(m, gated)
    grid = (triton.cdiv(m, launch.block_m), triton.cdiv(n, launch.block_n))
    _norm_gemm_kernel[grid](
        x2,
        delta.reshape(-1, k).contiguous() if delta is not None else x2,
        total if total is not None else out,
        norm,
        weight,
        out,
        m,
        n,
        eps,
        K=k,
        HAS_DELTA=delta is not None,
        GATED=gated,
        IEEE=x.dtype == torch.float32,
        BLOCK_M=launch.block_m,
        BLOCK_N=launch.block_n,
        BLOCK_K=launch.block_k,
        num_warps=launch.warps,
        num_stages=launch.stages,
        **launch_options(pdl),
    )
    return out.reshape(*lead, n), (total.reshape(x.shape) if total is not None else None)


def layer_forward(
    layer: DecoderLayer,
    x: Tensor,
    delta: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    bias: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    span: int,
) -> tuple[Tensor, Tensor]:
    """`DecoderLayer.forward` with its normed projections as `norm_gemm`s: (x, delta) -> (x, this
    layer's output still to be added)."""
    attn, mlp, pdl = layer.self_attn, layer.mlp, layer.kernels.pdl
    norm = layer.input_layernorm
    qkv, total = norm_gemm(x, attn.qkv_proj.weight, norm.weight, norm.eps, delta, pdl=pdl)
    x = x if total is None else total
    out = attn.attend(qkv, cos, sin, positions, bias, k_cache, v_cache, span)
    norm = layer.post_attention_layernorm
    hidden, x = norm_gemm(x, mlp.gate_up_proj.weight, norm.weight, norm.eps, out, gated=True, pdl=pdl)
    assert x is not None
    return x, mlp.down_proj(hidden)
