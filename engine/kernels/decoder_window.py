"""The codec decoder's sliding-window attention in one Triton kernel per layer (CUDA,
`Kernels.fused_window`, on by default: `EngineConfig.fused_window`).

Each of the window transformer's 8 layers attends a chunk's n new frames over the 71 keys and
values carried from the stream's frames before (`CodecDecoderState.keys`/`values`, after RoPE)
and the chunk's own. Eager, that is a gather of the rows' windows, a `cat` with the new keys, the
same for the values, SDPA with a [B, 1, n, 71 + n] mask, and an `index_copy_` of each new window
back: seven kernels. At 256 rows x 8 frames on an H200 the `cat`s took 2.0 ms and SDPA 1.9 of a
39.4 ms pass, and the gathers and write-backs a share of 1.7 ms that the convs' contexts take too
(docs/log/2026-11.md, "The decoder's convs in Triton"). With this kernel the pass took 35.2 ms
against 39.0 on one machine ("The window attention kernel measured").

Here a program owns one (row, head): it reads the row's carried window where it lies in the state,
attends the chunk's queries over it and the new keys with the band and stream-start mask in
registers (float32 scores and softmax; in half precision the probabilities are rounded to the
values' dtype for their product, as flash attention does), writes the output, and after a barrier shifts the window by n
in place. No other program touches its (row, head), so reading the window and writing it back
need no second kernel. Rows repeated in a batch (the scratch row that pads a graph's bucket) race
on their own window, which nobody reads back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

MAX_FRAMES = 16  # a chunk's frames one program attends (the graphs decode 1, 2, 4 or 8)
MIN_HEAD_DIM = 16  # the narrowest head a tensor-core dot takes


@triton.jit
def _slots(state_ptr, chunk_ptr, state_at, chunk_at, from_state, from_chunk):
    """Rows of key (value) slots: from the carried window where `from_state`, from the chunk where
    `from_chunk`, zeros elsewhere."""
    carried = tl.load(state_ptr + state_at, mask=from_state[:, None], other=0.0)
    fresh = tl.load(chunk_ptr + chunk_at, mask=from_chunk[:, None], other=0.0)
    return tl.where(from_state[:, None], carried, fresh)


@triton.jit
def _window_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    keys_ptr,
    values_ptr,
    rows_ptr,
    pos_ptr,
    out_ptr,
    n,
    scale,
    q_row_stride,
    q_time_stride,
    k_row_stride,
    k_time_stride,
    v_row_stride,
    v_time_stride,
    HEADS: tl.constexpr,
    D: tl.constexpr,
    PAST: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_L: tl.constexpr,
    IEEE: tl.constexpr,
):
    """out[b, i, h] for the chunk's queries i < n of row b, head h; then the state's window of the
    row's head shifted by n. q, k and v [B, n, HEADS, D] (heads contiguous, rows and times strided); keys/values [slots,
    HEADS, PAST, D] contiguous; out contiguous [B, n, HEADS * D]. Grid: (B, HEADS)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    row = tl.load(rows_ptr + b).to(tl.int64)
    pos = tl.load(pos_ptr + b)
    js = tl.arange(0, BLOCK_L)
    ds = tl.arange(0, D)
    iq = tl.arange(0, BLOCK_Q)
    window_at = (row * HEADS + h) * PAST * D
    k_at = b.to(tl.int64) * k_row_stride + h * D
    v_at = b.to(tl.int64) * v_row_stride + h * D
    # Key slot j: the carried window for j < PAST, then the chunk's frame j - PAST.
    in_past = js < PAST
    in_new = (js >= PAST) & (js < PAST + n)
    past_at = window_at + js[:, None] * D + ds[None, :]
    new_k_at = k_at + (js - PAST)[:, None] * k_time_stride + ds[None, :]
    new_v_at = v_at + (js - PAST)[:, None] * v_time_stride + ds[None, :]
    keys = _slots(keys_ptr, k_ptr, past_at, new_k_at, in_past, in_new)
    values = _slots(values_ptr, v_ptr, past_at, new_v_at, in_past, in_new)
    q_at = b.to(tl.int64) * q_row_stride + iq[:, None] * q_time_stride + h * D + ds[None, :]
    q = tl.load(q_ptr + q_at, mask=(iq < n)[:, None], other=0.0)
    if IEEE:
        scores = tl.dot(q, tl.trans(keys), input_precision="ieee") * scale
    else:
        scores = tl.dot(q, tl.trans(keys)) * scale
    # Query i (position pos + i) sees slots i..i + PAST of the chunk, those after the stream start.
    seen = (js[None, :] >= iq[:, None]) & (js[None, :] <= iq[:, None] + PAST) & (js < PAST + n)[None, :]
    seen = seen & ((pos - PAST + js) >= 0)[None, :]
    # A finite floor: padding queries (i >= n) may see nothing, and must not make NaNs.
    scores = tl.where(seen, scores, -1.0e30)
    weights = tl.exp(scores - tl.max(scores, axis=1)[:, None])
    weights = tl.where(seen, weights, 0.0)
    total = tl.sum(weights, axis=1)
    if IEEE:
        out = tl.dot(weights, values, input_precision="ieee")
    else:
        out = tl.dot(weights.to(values.dtype), values)
    out = out / tl.maximum(total, 1e-30)[:, None]
    out_at = (b.to(tl.int64) * n + iq[:, None]) * (HEADS * D) + h * D + ds[None, :]
    tl.store(out_ptr + out_at, out.to(out_ptr.dtype.element_ty), mask=(iq < n)[:, None])
    # The window after the chunk: slot w takes slot w + n of the keys above, once every thread of
    # the program has loaded what it reads.
    source = js + n
    keep = js < PAST
    from_past = keep & (source < PAST)
    from_new = keep & (source >= PAST)
    shifted_at = window_at + source[:, None] * D + ds[None, :]
    fresh_k_at = k_at + (source - PAST)[:, None] * k_time_stride + ds[None, :]
    fresh_v_at = v_at + (source - PAST)[:, None] * v_time_stride + ds[None, :]
    next_keys = _slots(keys_ptr, k_ptr, shifted_at, fresh_k_at, from_past, from_new)
    next_values = _slots(values_ptr, v_ptr, shifted_at, fresh_v_at, from_past, from_new)
    tl.debug_barrier()
    tl.store(keys_ptr + past_at, next_keys, mask=keep[:, None])
    tl.store(values_ptr + past_at, next_values, mask=keep[:, None])


def takes(frames: int, heads: int, kv_heads: int, head_dim: int) -> bool:
    """Whether the kernel serves a chunk of `frames` frames at these head counts and width. Each
    head needs its own keys (the released decoder's 16 and 16): with grouped heads, one program
    would shift a window that the group's other programs may not have read yet."""
    return (
        0 < frames <= MAX_FRAMES
        and heads == kv_heads
        and head_dim >= MIN_HEAD_DIM
        and head_dim & (head_dim - 1) == 0
    )


def attend(
    q: Tensor, k: Tensor, v: Tensor, keys: Tensor, values: Tensor, rows: Tensor, pos: Tensor
) -> Tensor:
    """Attention of q [B, n, H, D] over each row's carried window (`keys`/`values` [slots, KV, W, D],
    row rows[b], frames before: pos[b]) and the chunk's k, v [B, n, KV, D], as `Attention` computes
    it eagerly; writes each row's next window into `keys`/`values`. Returns [B, n, H * D]."""
    b, n, heads, d = q.shape
    kv_heads, past = keys.shape[1], keys.shape[2]
    if not takes(n, heads, kv_heads, d):
        raise ValueError(f"decoder_window: {n} frames of {heads}/{kv_heads} heads of {d} are not taken")
    if k.shape != (b, n, kv_heads, d) or v.shape != k.shape:
        raise ValueError(f"decoder_window: k {tuple(k.shape)} and v {tuple(v.shape)} do not match q")
    if any(t.stride(3) != 1 or t.stride(2) != d for t in (q, k, v)):
        raise ValueError("decoder_window: q, k and v need contiguous heads")
    if not (keys.is_contiguous() and values.is_contiguous() and keys.shape == values.shape):
        raise ValueError("decoder_window: the state's keys and values must be contiguous and alike")
    out = torch.empty(b, n, heads * d, device=q.device, dtype=q.dtype)
    if b == 0:
        return out
    _window_kernel[(b, heads)](
        q,
        k,
        v,
        keys,
        values,
        rows,
        pos,
        out,
        n,
        d**-0.5,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        HEADS=heads,
        D=d,
        PAST=past,
        BLOCK_Q=MAX_FRAMES,
        BLOCK_L=triton.next_power_of_2(past + MAX_FRAMES),
        IEEE=q.dtype == torch.float32,
        num_warps=4,
    )
    return out
