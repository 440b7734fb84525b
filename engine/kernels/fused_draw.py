"""A token draw in one Triton kernel: `sampling.sample` for every row of a batch, plus the chosen
code's embedding row, or with the talker's penalty and masks first (CUDA; `Kernels.fused_draw`, from
the engine's `fused_draw` setting, on by default).

At one stream a frame makes 16 draws: code 0, then 15 in the code predictor. Each unfused draw is
a top-k (about 19 us on an H100, several passes over the vocabulary), a handful of 2 us
elementwise kernels around it, and an embedding lookup for the next step. Here one program per
row does all of it with the logits in registers:

- greedy: the first index of the largest logit;
- sampling: temperature, then the top-k threshold and, below 1, the top-p threshold, each found by
  bisection over the logits' order-preserving integer keys (a count, then a mass, per bit: no
  sort), then the Gumbel race over the kept ids with the same counter-based noise per id.

The kept set is `sampling._filter_best`'s (ids at or above the k-th scaled logit; then ids whose
better-ranked mass is below top_p), so the draws are the same wherever no two logits tie at a
threshold. Only the race's logarithms and the top-p softmax may differ in their last bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from voicewire.engine.kernels.pdl import launch_options
from voicewire.engine.model.sampling import RowSampling


@triton.jit
def _mix32(x):
    """sampling._mix32 on uint32 values held in int64."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    return (x >> 16) ^ x


@triton.jit
def _threshold(keys, weights, need):
    """The largest int32 key t with sum(weights[keys >= t]) >= need, by bisection over its 32 bits
    (keys int32; weights 0 where an id is out)."""
    low = tl.full([], -(2**31), tl.int64)
    # A loop, not unrolled: 32 unrolled passes (two bisections) made the kernel ~6,500 instructions.
    for bit in range(31, -1, -1):
        candidate = low + (tl.full([], 1, tl.int64) << bit)
        held = tl.sum(tl.where(keys >= candidate.to(tl.int32), weights, 0), axis=0)
        low = tl.where(held >= need, candidate, low)
    return low.to(tl.int32)


@triton.jit(do_not_specialize=["counter_offset"])  # 0..15 would compile up to three variants
def _draw_kernel(
    logits_ptr,
    logits_stride,
    do_sample_ptr,
    temperature_ptr,
    top_k_ptr,
    top_p_ptr,
    seed_ptr,
    counter_ptr,
    counter_offset,
    codes_ptr,
    codes_stride,
    table_ptr,
    rows_ptr,
    seen_ptr,
    penalty_ptr,
    banned_ptr,
    no_eos_ptr,
    eos,
    V,
    H,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HAS_TABLE: tl.constexpr,
    HAS_MASKS: tl.constexpr,
    PDL: tl.constexpr,
):
    if PDL:  # everything here is written by earlier kernels (engine.pdl)
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    ids = tl.arange(0, BLOCK_V)
    in_vocab = ids < V
    logits = tl.load(logits_ptr + row * logits_stride + ids, mask=in_vocab, other=float("-inf"))
    dtype = logits.dtype
    logits = logits.to(tl.float32)
    if HAS_MASKS:
        # As frame_step.choose_code0: the repetition penalty in the logits' dtype (its products
        # round there), then banned ids, and EOS where the row may not end yet.
        penalty = tl.load(penalty_ptr + row).to(dtype).to(tl.float32)
        penalized = (
            tl.where(logits < 0, logits * penalty, tl.div_rn(logits, penalty)).to(dtype).to(tl.float32)
        )
        seen = tl.load(seen_ptr + row * V + ids, mask=in_vocab, other=0) != 0
        logits = tl.where(seen, penalized, logits)
        banned = tl.load(banned_ptr + ids, mask=in_vocab, other=0) != 0
        banned = banned | ((ids == eos) & (tl.load(no_eos_ptr + row) != 0))
        logits = tl.where(banned, float("-inf"), logits)
    code = tl.argmax(logits, axis=0, tie_break_left=True).to(tl.int64)

    if tl.load(do_sample_ptr + row) != 0:
        scaled = tl.div_rn(logits, tl.load(temperature_ptr + row))
        # Order-preserving int32 keys of the float32 values: negative floats flip their magnitude.
        bits = scaled.to(tl.int32, bitcast=True)
        keys = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        top_k = tl.load(top_k_ptr + row)
        top_k = tl.where((top_k > 0) & (top_k < V), top_k, V)
        kept = in_vocab & (keys >= _threshold(keys, in_vocab.to(tl.int32), top_k))
        top_p = tl.load(top_p_ptr + row)
        if top_p < 1.0:
            best = tl.max(scaled, axis=0)
            weights = tl.where(kept, tl.exp(scaled - best), 0.0)
            probs = weights / tl.sum(weights, axis=0)
            # Keeps the ids whose better-ranked mass is below top_p: those at or above the
            # largest key whose mass from the top reaches top_p.
            kept = kept & (keys >= _threshold(keys, probs, top_p))
        # sampling.uniform_noise: a hash of (seed, counter) keys a hash of each id.
        seed = tl.load(seed_ptr + row)
        counter = tl.load(counter_ptr + row) + counter_offset
        key = _mix32((seed & 0xFFFFFFFF) ^ _mix32(((seed >> 32) & 0xFFFFFFFF) ^ _mix32(counter & 0xFFFFFFFF)))
        noise_bits = _mix32((key + ids.to(tl.int64) * 0x9E3779B9) & 0xFFFFFFFF) >> 9
        noise = (noise_bits.to(tl.float32) + 0.5) * (1.0 / (1 << 23))
        race = tl.where(kept, scaled - tl.log(-tl.log(noise)), float("-inf"))
        code = tl.argmax(race, axis=0, tie_break_left=True).to(tl.int64)

    tl.store(codes_ptr + row * codes_stride, code)
    if HAS_TABLE:
        cols = tl.arange(0, BLOCK_H)
        embedded = tl.load(table_ptr + code * H + cols, mask=cols < H)
        tl.store(rows_ptr + row * H + cols, embedded, mask=cols < H)


@dataclass
class Masks:
    """What frame_step.choose_code0 applies before its draw, per row of a [B, V] batch."""

    seen: Tensor  # [B, V] bool: ids the sequence generated already (repetition penalty)
    penalty: Tensor  # [B] float32
    banned: Tensor  # [V] bool: ids never drawn
    no_eos: Tensor  # [B] bool: rows whose `eos` id is banned too
    eos: int


def draw(
    logits: Tensor,
    params: RowSampling,
    seed: Tensor,
    counter: Tensor,
    counter_offset: int = 0,
    out: Tensor | None = None,
    table: Tensor | None = None,
    masks: Masks | None = None,
    pdl: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """`sampling.sample(logits, params, seed, counter + counter_offset)` for logits [B, V] -> (ids
    [B], written into `out` [B] when given, e.g. a column of a codes buffer; and with `table`
    [V', H], the chosen ids' rows [B, H], or None). With `masks`, the logits are first penalized
    and masked as `frame_step.choose_code0` does. `pdl`: launched with programmatic dependent
    launch (engine.pdl)."""
    b, vocab = logits.shape
    if logits.stride(1) != 1:
        raise ValueError("the logits' last dim must be contiguous")
    if out is None:
        out = torch.empty(b, dtype=torch.long, device=logits.device)
    elif out.shape != (b,) or out.dtype != torch.long:
        raise ValueError(f"out must be int64 [{b}], got {out.dtype} {tuple(out.shape)}")
    rows = None
    if table is not None:
        if table.shape[0] < vocab or not table.is_contiguous():
            raise ValueError(f"table {tuple(table.shape)} must be contiguous with at least {vocab} rows")
        rows = torch.empty(b, table.shape[1], device=logits.device, dtype=table.dtype)
    if masks is not None and (
        masks.seen.shape != (b, vocab) or not masks.seen.is_contiguous() or masks.banned.shape != (vocab,)
    ):
        raise ValueError(f"masks must be contiguous [{b}, {vocab}] seen ids and [{vocab}] banned ids")
    block_v = triton.next_power_of_2(vocab)
    _draw_kernel[(b,)](
        logits,
        logits.stride(0),
        params.do_sample,
        params.temperature,
        params.top_k,
        params.top_p,
        seed,
        counter,
        counter_offset,
        out,
        out.stride(0),
        table if table is not None else logits,
        rows if rows is not None else logits,
        masks.seen if masks is not None else logits,
        masks.penalty if masks is not None else logits,
        masks.banned if masks is not None else logits,
        masks.no_eos if masks is not None else logits,
        masks.eos if masks is not None else -1,
        vocab,
        table.shape[1] if table is not None else 1,
        BLOCK_V=block_v,
        BLOCK_H=triton.next_power_of_2(table.shape[1]) if table is not None else 1,
        HAS_TABLE=table is not None,
        HAS_MASKS=masks is not None,
        num_warps=4 if block_v <= 2048 else 8,
        **launch_options(pdl),
    )
    return out, rows
