"""A decoder layer in five Triton kernels, for steps of a few rows, and its attention kernel for decode
steps at any batch (CUDA, `Kernels.fused_layer`).

At one stream a frame runs 103 layer passes (28 talker layers, then the code predictor's 5 layers
15 times), and launch-bound kernels, not weight reads, set its time: the unfused layer is about a
dozen kernels. Here a layer is

1. residual sum + RMSNorm + the q/k/v projection (the norm computed in each program's prologue),
2. q/k norm + RoPE + the k/v cache write + attention over the span, one program per key head,
3. the output projection,
4. residual sum + RMSNorm + the gate/up projection with SiLU(gate) * up in its epilogue,
5. the down projection,

and each projection is a GEMV that reads every weight once for all rows. Only the order of float
sums differs from the unfused layer (`layers.DecoderLayer`), which stays the path for larger
batches (above `MAX_ROWS` cuBLAS's GEMMs win), prefills and CPUs. At larger batches the unfused
layer still takes kernel 2 as its attention wherever `attends` allows (up to `MAX_QUERY_ROWS` query
rows per key head): each row reads its keys only up to its own position, not the whole span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl
from torch import Tensor

from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.pdl import launch_options

if TYPE_CHECKING:
    from voicewire.engine.model.layers import Attention, DecoderConfig, DecoderLayer, DecoderStack, KVCache

MAX_ROWS = 2  # batch rows x new positions the fused layer takes; from 4 on cuBLAS's GEMMs win (H100)
GEMV_ROWS = 8  # rows one GEMV program holds in registers
MAX_QUERY_ROWS = 16  # query rows per key head (groups x new positions) the attention kernel tiles


@triton.jit
def _gemv_kernel(
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
    NORM: tl.constexpr,
    GATED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """out[m, n] = h[m, :] @ w[n, :], h = x (+ delta, written to sum) (RMS-normed and scaled by
    norm). GATED: w holds gate rows then up rows, and out = SiLU(h @ gate) * (h @ up).

    One pass over K: the norm's 1/rms is a per-row factor, so it scales the sums at the end, and
    the squares are summed with them. A first pass for the norm would add its load latency to
    every projection; at a few rows that latency, not bandwidth, is the cost. Each block's weights
    are loaded a block ahead, the first before the wait for the previous kernel (engine.pdl): at
    0.6B's K of 1024 that is all of them."""
    pid = tl.program_id(0)
    dtype = x_ptr.dtype.element_ty
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < m
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    ks = tl.arange(0, BLOCK_K)

    w_at = cols[:, None] * K + ks[None, :]
    w_ok = col_ok[:, None] & (ks < K)[None, :]
    w = tl.load(w_ptr + w_at, mask=w_ok, other=0.0)
    if GATED:
        up = tl.load(w_ptr + n * K + w_at, mask=w_ok, other=0.0)
    else:
        up = w
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
        w_now = w
        up_now = up
        ahead = k0 + BLOCK_K + ks
        w_at = cols[:, None] * K + ahead[None, :]
        w_ok = col_ok[:, None] & (ahead < K)[None, :]
        w = tl.load(w_ptr + w_at, mask=w_ok, other=0.0)
        if GATED:
            up = tl.load(w_ptr + n * K + w_at, mask=w_ok, other=0.0)
        if HAS_DELTA:
            # The residual sum rounds to the model's dtype, as the unfused sum does.
            h = (h.to(tl.float32) + tl.load(delta_ptr + at, mask=ok, other=0.0).to(tl.float32)).to(dtype)
            if pid == 0:
                tl.store(sum_ptr + at, h, mask=ok)
        h32 = h.to(tl.float32)
        if NORM:
            squares += tl.sum(h32 * h32, axis=1)
            h32 = h32 * tl.load(norm_ptr + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
        acc += tl.sum(h32[:, None, :] * w_now.to(tl.float32)[None, :, :], axis=2)
        if GATED:
            acc_up += tl.sum(h32[:, None, :] * up_now.to(tl.float32)[None, :, :], axis=2)

    if NORM:
        inv = 1.0 / tl.sqrt(squares / K + eps)
        acc = acc * inv[:, None]
        acc_up = acc_up * inv[:, None]
    if GATED:
        # Gate and up round to the model's dtype first, as the unfused projection's outputs do.
        gate = acc.to(dtype).to(tl.float32)
        acc = gate * tl.sigmoid(gate) * acc_up.to(dtype).to(tl.float32)
    out_at = rows[:, None] * n + cols[None, :]
    tl.store(out_ptr + out_at, acc.to(dtype), mask=row_ok[:, None] & col_ok[None, :])


def _gemv_blocks(n: int, k: int, m: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K), as timed on an H100 (docs/log/2026-11.md, "The fused layer"): few output
    columns and long K strips per program, then shorter strips where the rows' product would
    spill registers."""
    block_k = min(1024, triton.next_power_of_2(k))
    block_n = 2 if n <= 4096 else 4
    while m * block_n * block_k > 8192 and block_k > 64:
        block_k //= 2
    return block_n, block_k


def gemv(
    x: Tensor,
    weight: Tensor,
    delta: Tensor | None = None,
    norm: Tensor | None = None,
    eps: float = 0.0,
    gated: bool = False,
    pdl: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """x [..., K] (+ delta), RMS-normed with `norm` [K] if given, times weight [N, K]^T ->
    (out [..., N], or [..., N / 2] when `gated`; the residual sum x + delta, or None). `pdl`:
    launched with programmatic dependent launch (engine.pdl)."""
    k = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    if m > GEMV_ROWS:
        raise ValueError(f"gemv takes at most {GEMV_ROWS} rows, got {m}")
    if weight.shape[1] != k or (gated and weight.shape[0] % 2):
        raise ValueError(f"weight {tuple(weight.shape)} does not fit input width {k} (gated={gated})")
    if delta is not None and norm is None:
        raise ValueError("a residual sum is only taken ahead of a norm")
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    total = torch.empty_like(x2) if delta is not None else None
    block_n, block_k = _gemv_blocks(n, k, triton.next_power_of_2(m))
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x2.contiguous(),
        delta.reshape(-1, k).contiguous() if delta is not None else x2,
        total if total is not None else out,
        norm if norm is not None else weight,
        weight,
        out,
        m,
        n,
        eps,
        K=k,
        HAS_DELTA=delta is not None,
        NORM=norm is not None,
        GATED=gated,
        BLOCK_M=triton.next_power_of_2(m),
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        **launch_options(pdl),
    )
    return out.reshape(*lead, n), (total.reshape(x.shape) if total is not None else None)


@triton.jit
def _attention_kernel(
    qkv_ptr,
    q_norm_ptr,
    k_norm_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    eps,
    scale,
    cache_b,
    cache_h,
    SPAN: tl.constexpr,
    T: tl.constexpr,
    HEADS: tl.constexpr,
    KV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
    IEEE: tl.constexpr,
    ROPE_TABLES: tl.constexpr,
    PDL: tl.constexpr,
):
    """One (batch row, key head): norm + RoPE of its new keys, which go with their values to the
    cache at the rows' positions, then its G x T query rows (normed, rotated) attend over cache
    positions [0, span) that are <= their own position, with a streaming softmax. ROPE_TABLES: cos
    and sin are whole tables [L, D] read at each row's position, else one row [D] per query row."""
    b = tl.program_id(0)
    j = tl.program_id(1)
    dtype = k_cache_ptr.dtype.element_ty
    G: tl.constexpr = HEADS // KV
    HALF: tl.constexpr = D // 2
    width: tl.constexpr = (HEADS + 2 * KV) * D
    dd = tl.arange(0, D)
    # NeoX rotation: x * cos + [-x2, x1] * sin, x1/x2 the halves of x.
    partner = (dd + HALF) % D
    sign = tl.where(dd < HALF, -1.0, 1.0)
    cache_at = b * cache_b + j * cache_h

    k_w = tl.load(k_norm_ptr + dd).to(tl.float32)
    k_w_partner = tl.load(k_norm_ptr + partner).to(tl.float32)
    q_w = tl.load(q_norm_ptr + dd).to(tl.float32)
    q_w_partner = tl.load(q_norm_ptr + partner).to(tl.float32)
    if PDL:  # the norms' weights above; all else waits for the previous kernel (engine.pdl)
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    for t in tl.static_range(T):
        row = b * T + t
        pos = tl.load(pos_ptr + row)
        key_at = qkv_ptr + row * width + (HEADS + j) * D
        key = tl.load(key_at + dd).to(tl.float32)
        key_partner = tl.load(key_at + partner).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(key * key, axis=0) / D + eps)
        key = ((key * inv).to(dtype).to(tl.float32) * k_w).to(dtype).to(tl.float32)
        key_partner = ((key_partner * inv).to(dtype).to(tl.float32) * k_w_partner).to(dtype).to(tl.float32)
        rope_at = pos if ROPE_TABLES else row
        cos = tl.load(cos_ptr + rope_at * D + dd)
        sin = tl.load(sin_ptr + rope_at * D + dd)
        rotated = (key * cos + sign * key_partner * sin).to(dtype)
        value = tl.load(qkv_ptr + row * width + (HEADS + KV + j) * D + dd)
        tl.store(k_cache_ptr + cache_at + pos * D + dd, rotated)
        tl.store(v_cache_ptr + cache_at + pos * D + dd, value)
    # The loads below read what this program's threads just wrote.
    tl.debug_barrier()

    r = tl.arange(0, BLOCK_R)
    r_ok = r < G * T
    head = j * G + r // T
    q_row = b * T + r % T
    q_pos = tl.load(pos_ptr + q_row, mask=r_ok, other=0)  # padding rows see position 0 only
    q_at = qkv_ptr + q_row[:, None] * width + head[:, None] * D
    query = tl.load(q_at + dd[None, :], mask=r_ok[:, None], other=0.0).to(tl.float32)
    query_partner = tl.load(q_at + partner[None, :], mask=r_ok[:, None], other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(query * query, axis=1) / D + eps)
    query = ((query * inv[:, None]).to(dtype).to(tl.float32) * q_w[None, :]).to(dtype).to(tl.float32)
    query_partner = (
        ((query_partner * inv[:, None]).to(dtype).to(tl.float32) * q_w_partner[None, :])
        .to(dtype)
        .to(tl.float32)
    )
    q_rope_at = q_pos if ROPE_TABLES else q_row
    cos = tl.load(cos_ptr + q_rope_at[:, None] * D + dd[None, :], mask=r_ok[:, None], other=0.0)
    sin = tl.load(sin_ptr + q_rope_at[:, None] * D + dd[None, :], mask=r_ok[:, None], other=0.0)
    query = (query * cos + sign[None, :] * query_partner * sin).to(dtype)

    best = tl.full([BLOCK_R], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, D], tl.float32)
    # Blocks past the furthest of this row's positions are all masked: not read. A batch's rows are
    # at different points of their sequences, and the span only bounds the furthest of them all.
    end = tl.minimum(tl.max(q_pos, axis=0) + 1, SPAN)
    for l0 in range(0, end, BLOCK_L):
        slots = l0 + tl.arange(0, BLOCK_L)
        in_span = slots < SPAN
        keys = tl.load(
            k_cache_ptr + cache_at + slots[None, :] * D + dd[:, None], mask=in_span[None, :], other=0.0
        )
        # Scores round to the cache's dtype, as the unfused matmul's output does.
        if IEEE:  # float32 models: no TF32 products, as in the unfused matmul
            scores = tl.dot(query, keys, input_precision="ieee")
        else:
            scores = tl.dot(query, keys)
        scores = scores.to(dtype).to(tl.float32) * scale
        visible = (slots[None, :] <= q_pos[:, None]) & in_span[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, axis=1))
        weights = tl.exp(scores - new_best[:, None])
        shrink = tl.exp(best - new_best)
        total = total * shrink + tl.sum(weights, axis=1)
        values = tl.load(
            v_cache_ptr + cache_at + slots[:, None] * D + dd[None, :], mask=in_span[:, None], other=0.0
        )
        if IEEE:
            acc = acc * shrink[:, None] + tl.dot(weights.to(dtype), values, input_precision="ieee")
        else:
            acc = acc * shrink[:, None] + tl.dot(weights.to(dtype), values)
        best = new_best
    out_at = out_ptr + q_row[:, None] * (HEADS * D) + head[:, None] * D + dd[None, :]
    tl.store(out_at, (acc / total[:, None]).to(dtype), mask=r_ok[:, None])


@dataclass(frozen=True)
class AttentionLaunch:
    """How the attention kernel is launched: keys per block of its loop, warps, pipeline stages."""

    block_keys: int
    warps: int
    stages: int


def attention_launch(programs: int, span: int) -> AttentionLaunch:
    """The launch for `programs` (batch rows x key heads) over `span` positions, as timed on an H200
    (docs/log/2026-11.md, "The attention kernel's launch", session 49). From 1,024 programs (128
    rows of 8 key heads) blocks of 16 keys on one warp let more programs stay resident on each SM,
    where they hide each other's loads: 28.9 us a talker layer at 256 rows against 40.7 with blocks
    of 64 on four warps. From 128 programs, blocks of 32 on one warp; below that, few programs
    each take blocks of up to 64 keys on four warps (3.3 us at one row)."""
    fits = max(16, triton.next_power_of_2(span))  # tl.dot takes 16 keys at least
    if programs >= 1024:
        return AttentionLaunch(min(16, fits), warps=1, stages=2)
    if programs >= 128:
        return AttentionLaunch(min(32, fits), warps=1, stages=3)
    return AttentionLaunch(min(64, fits), warps=4, stages=3)


def attend(
    qkv: Tensor,
    q_norm: Tensor,
    k_norm: Tensor,
    eps: float,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    span: int,
    heads: int,
    pdl: bool = False,
    launch: AttentionLaunch | None = None,
) -> Tensor:
    """qkv [B, T, (heads + 2 kv) d] from the stacked projection, cos/sin float32 (each row's
    [B, T, d], or the tables of every cache position [L, d], read at the rows' positions) and
    positions [B, T] -> attention output [B, T, heads d]; writes the new keys and values at each
    row's positions of the caches [B, kv, L, d] (whole, contiguous tensors). `pdl`: launched with
    programmatic dependent launch (engine.pdl). `launch`: `attention_launch`'s choice unless given."""
    b, t, _ = qkv.shape
    _, kv, length, d = k_cache.shape
    groups = heads // kv
    if groups * t > MAX_QUERY_ROWS:
        raise ValueError(f"{groups} x {t} query rows per key head exceed {MAX_QUERY_ROWS}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("the caches must be contiguous (the kernel writes them in place)")
    if span > length:
        raise ValueError(f"span {span} exceeds the cache length {length}")
    tables = cos.dim() == 2
    if cos.shape != sin.shape or cos.shape != ((length, d) if tables else (b, t, d)):
        raise ValueError(
            f"cos/sin {tuple(cos.shape)} fit neither rows ({b}, {t}, {d}) nor tables ({length}, {d})"
        )
    out = torch.empty(b, t, heads * d, device=qkv.device, dtype=qkv.dtype)
    launch = launch or attention_launch(b * kv, span)
    _attention_kernel[(b, kv)](
        qkv.contiguous(),
        q_norm,
        k_norm,
        cos.contiguous(),
        sin.contiguous(),
        positions.contiguous(),
        k_cache,
        v_cache,
        out,
        eps,
        d**-0.5,
        kv * length * d,
        length * d,
        SPAN=span,
        T=t,
        HEADS=heads,
        KV=kv,
        D=d,
        BLOCK_R=max(16, triton.next_power_of_2(groups * t)),
        BLOCK_L=launch.block_keys,
        IEEE=qkv.dtype == torch.float32,
        ROPE_TABLES=tables,
        num_warps=launch.warps,
        num_stages=launch.stages,
        **launch_options(pdl),
    )
    return out


def attends(x: Tensor, cfg: DecoderConfig) -> bool:
    """Whether `attend` takes a step of x [B, T, H]: on CUDA, at most MAX_QUERY_ROWS query rows per
    key head, and a head size its tiles take (a power of two, 16 or more). Any batch: each row reads
    only the keys up to its own position, where the unfused attention reads the whole span."""
    d = cfg.head_dim
    return (
        x.is_cuda
        and cfg.num_heads // cfg.num_kv_heads * x.shape[1] <= MAX_QUERY_ROWS
        and d >= 16
        and d & (d - 1) == 0
    )


def layer_attention(
    attn: Attention,
    qkv: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    span: int,
) -> Tensor:
    """`attend` with the norms, head count and kernels of `attn`, a `layers.Attention`."""
    q_norm, k_norm = attn.q_norm, attn.k_norm
    return attend(
        qkv, q_norm.weight, k_norm.weight, q_norm.eps, cos, sin, positions, k_cache, v_cache, span,
        attn.cfg.num_heads, attn.kernels.pdl,
    )  # fmt: skip


def applies(x: Tensor, cfg: DecoderConfig) -> bool:
    """Whether the whole fused layer takes a step of x [B, T, H]: `attends` and at most MAX_ROWS rows."""
    return x.shape[0] * x.shape[1] <= MAX_ROWS and attends(x, cfg)


def layer_forward(
    layer: DecoderLayer,
    x: Tensor,
    delta: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    span: int,
) -> tuple[Tensor, Tensor]:
    """`DecoderLayer.forward` in five kernels: (x, delta) -> (x, this layer's output still to be
    added)."""
    attn, mlp, pdl = layer.self_attn, layer.mlp, layer.kernels.pdl
    norm = layer.input_layernorm
    qkv, total = gemv(x, attn.qkv_proj.weight, delta, norm.weight, norm.eps, pdl=pdl)
    x = x if total is None else total
    out = layer_attention(attn, qkv, cos, sin, positions, k_cache, v_cache, span)
    out, _ = gemv(out, attn.o_proj.weight, pdl=pdl)
    norm = layer.post_attention_layernorm
    hidden, x = gemv(x, mlp.gate_up_proj.weight, out, norm.weight, norm.eps, gated=True, pdl=pdl)
    assert x is not None
    out, _ = gemv(hidden, mlp.down_proj.weight, pdl=pdl)
    return x, out


def stack_layers(
    stack: DecoderStack, x: Tensor, positions: Tensor, cache: KVCache
) -> tuple[Tensor, Tensor | None]:
    """`stack`'s layers through `layer_forward`: x [B, T, H] at positions [B, T] -> (x, the last
    layer's output still to be added), ahead of the final norm. RoPE is read from the cache's
    tables inside the attention kernel: no gathered cos/sin per forward."""
    delta = None
    for i, layer in enumerate(stack.layers):
        x, delta = layer_forward(
            layer, x, delta, cache.cos, cache.sin, positions, cache.k[i], cache.v[i], cache.length
        )
    return x, delta


def stack_forward(stack: DecoderStack, x: Tensor, positions: Tensor, cache: KVCache) -> Tensor:
    """`DecoderStack.forward` through `layer_forward`: x [B, T, H] at positions [B, T] -> normed
    hidden states [B, T, H]."""
    x, delta = stack_layers(stack, x, positions, cache)
    if delta is None:
        return stack.norm(x)
    return stack.kernels.fuse(pointwise.add_rms_norm)(x, delta, stack.norm.weight, stack.norm.eps)[1]


def stack_last_logits(
    stack: DecoderStack, x: Tensor, positions: Tensor, cache: KVCache, head: Tensor
) -> Tensor:
    """The last position's logits [B, V] through `head` [V, H]: the stack's final norm runs in the
    head GEMV's prologue, one kernel fewer per forward."""
    x, delta = stack_layers(stack, x, positions, cache)
    norm = stack.norm
    last = None if delta is None else delta[:, -1]
    logits, _ = gemv(x[:, -1], head, last, norm.weight, norm.eps, pdl=stack.kernels.pdl)
    return logits
