"""Elementwise pieces of the model, as functions torch.compile fuses.

Eager PyTorch runs each of these as several kernels, and at a frame's batch sizes the kernel
count, not the arithmetic, sets the speed. A function marked `@fusable` is a plain function, run
eagerly wherever it is called directly; `compiled(fn)` is its torch.compile'd twin, as one or a
few generated kernels. Which of the two a model part calls is its `Kernels` value's choice
(`Kernels.fuse`, engine/kernels/choice.py). The math is the same; only reduction order may differ. Other
modules mark their own glue (the draw, the attention inputs, the frame's embedding sum) the same
way. Inside a compiled function, the fusable functions it calls are traced into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

log = logging.getLogger(__name__)

Fn = TypeVar("Fn", bound=Callable)

_fusable: set[Callable] = set()  # the marked functions: the only ones `compiled` compiles
# A cache: each marked function compiled once per process, and once more with PDL (`compiled`).
_compiled: dict[tuple[Callable, bool], Callable] = {}


def fusable(fn: Fn) -> Fn:
    """Mark a module-level function as one `compiled` may compile; it stays the function it is."""
    _fusable.add(fn)
    return fn


def compiled(fn: Fn, pdl: bool = False) -> Fn:
    """The compiled twin of `fn`, a `@fusable` function (made on first use, then kept); with `pdl`,
    a twin of its own whose kernels launch with programmatic dependent launch (Inductor's
    `triton.enable_pdl`; `Kernels.pdl_compiled`, on trial): each waits before its first read, as the
    engine's own kernels do. The switch goes to that compile only, not into torch's process-wide
    config: torch 2.11 (the lent GPU hosts') has no such switch, and a config entry set and put back
    by a test leaves every later compile failing."""
    twin = _compiled.get((fn, pdl))
    if twin is None:
        if fn not in _fusable:
            raise ValueError(f"{fn.__qualname__} is not marked @fusable")
        configure_compiler()
        options = {"triton.enable_pdl": True} if pdl else None
        # dynamic: one kernel family serves every batch size, width and span.
        twin = _compiled[(fn, pdl)] = torch.compile(fn, dynamic=True, options=options)
    return twin  # type: ignore[return-value]


def configure_compiler() -> None:
    """torch.compile's settings for these functions (process-wide, as torch's config is; idempotent)."""
    import torch._inductor.config as inductor_config

    # Each function meets several widths, dtypes and 0/1-sized dims (talker, predictor, codec
    # decoder): room for those variants, and eager instead of an error should a new one exceed it.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    # Softmaxes here span at most a KV (persistent reductions: one read either way). Online softmax
    # only warns and falls back wherever inductor splits the reduction (one row over a long span).
    inductor_config.online_softmax = False


def inductor_has_pdl() -> bool:
    """Whether this torch's Inductor can launch its kernels with PDL (`triton.enable_pdl`)."""
    import torch._inductor.config as inductor_config

    return "triton.enable_pdl" in inductor_config.get_config_copy()


@fusable
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Normalized in float32, cast back, then scaled: Qwen's order."""
    if x.dtype == torch.float32:  # the casts would be no-ops, yet each a dispatch
        return weight * F.rms_norm(x, (x.shape[-1],), eps=eps)
    normed = F.rms_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    return weight * normed.to(x.dtype)


@fusable
def add_rms_norm(x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The residual sum x + delta, and its norm."""
    total = x + delta
    return total, rms_norm(total, weight, eps)


@fusable
def scaled_add(x: Tensor, scale: Tensor, branch: Tensor) -> Tensor:
    """x + scale * branch: a residual sum with a per-channel scaled branch."""
    return x + scale * branch


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """NeoX rotation (halves, not interleaved pairs) of x [..., T, d]; cos/sin broadcast to x."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@fusable
def rotate_pair(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """`rotate` of queries and keys together."""
    return rotate(q, cos, sin), rotate(k, cos, sin)


@fusable
def qk_norm_rope_store(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_weight: Tensor,
    k_weight: Tensor,
    eps: float,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
) -> Tensor:
    """Per-head norm then RoPE of q [B, T, h, d] and k [B, T, kv, d]; k and v [B, T, kv, d] are
    written at each row's positions [B, T] of the caches [B, kv, L, d]; returns q [B, h, T, d].
    cos/sin [B, T, d] float32. The caches must be whole (contiguous) tensors: written through a
    strided view, the compiled version would copy the whole cache around the write."""
    cos, sin = cos[:, None], sin[:, None]
    if torch.compiler.is_compiling() or q.dtype != torch.float32:
        q = rotate(rms_norm(q, q_weight, eps).transpose(1, 2), cos, sin).to(q.dtype)
        k = rotate(rms_norm(k, k_weight, eps).transpose(1, 2), cos, sin).to(k.dtype)
    else:
        # Eager float32 (a CPU): each op costs a dispatch, which at a few rows outweighs the math,
        # so q's and k's heads are normed and rotated together, with the same arithmetic per element.
        heads = q.shape[2]
        weight = torch.cat((q_weight.expand(heads, -1), k_weight.expand(k.shape[2], -1)))
        qk = rotate(rms_norm(torch.cat((q, k), dim=2), weight, eps).transpose(1, 2), cos, sin)
        q, k = qk[:, :heads], qk[:, heads:]
    rows = torch.arange(q.shape[0], device=q.device)[:, None]
    # Indices on dims 0 and 2 around a slice: the written block is [B, T, kv, d].
    k_cache[rows, :, positions] = k.transpose(1, 2)
    v_cache[rows, :, positions] = v
    return q


@fusable
def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    return F.silu(gate) * up


def snake_beta(
    x: Tensor, log_alpha: Tensor, log_beta: Tensor, bias: Tensor | None = None, out: Tensor | None = None
) -> Tensor:
    """The codec decoder's activation on time-major x [B, T, C]: x + sin²(x·e^alpha) / e^beta per
    channel, of x + `bias` [C] if given (the bias of the conv before it), written into `out` if
    given. Eager it is five passes over the decoder's largest tensors, made in place in one new
    tensor (fresh pages of a large tensor cost a CPU as much as a pass); with
    `Kernels.fused_snake`, `fused_snake` does it in one."""
    if bias is not None:
        x = x + bias
    y = torch.mul(x, log_alpha.exp(), out=out) if out is not None else x * log_alpha.exp()
    # The same arithmetic per element as x + (1 / (e^beta + 1e-9)) * sin(...)^2: products and sums
    # commute exactly.
    return y.sin_().pow_(2).mul_(1.0 / (log_beta.exp() + 1e-9)).add_(x)


def snake_beta_after(context: Tensor, x: Tensor, log_alpha: Tensor, log_beta: Tensor) -> Tensor:
    """[context, snake_beta(x)] along time ([B, c, C] and [B, T, C]): the input of the causal conv
    after the activation, the activation written in place after the context."""
    c = context.shape[1]
    full = x.new_empty(x.shape[0], c + x.shape[1], x.shape[2])
    full[:, :c] = context
    snake_beta(x, log_alpha, log_beta, out=full[:, c:])
    return full


@fusable
def frame_embedding(codes: Tensor, code0_table: Tensor, residual_tables: list[Tensor]) -> Tensor:
    """A frame's codes [B, 16] -> code 0's row plus the sum of codes 1..15's rows [B, H] (summed
    in that order, as one eager sum would)."""
    residual = F.embedding(codes[:, 1], residual_tables[0])
    for k in range(1, len(residual_tables)):
        residual = residual + F.embedding(codes[:, k + 1], residual_tables[k])
    return F.embedding(codes[:, 0], code0_table) + residual
