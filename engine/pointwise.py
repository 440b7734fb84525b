"""Elementwise pieces of the decoder layers and the codec decoder, as functions torch.compile fuses.

Eager PyTorch runs each of these as several kernels, and at a frame's batch sizes the kernel
count, not the arithmetic, sets the speed. `enable_fusion()` (CUDA engines) swaps in compiled
versions, one generated kernel each. The math is the same; only reduction order may differ.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor

log = logging.getLogger(__name__)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Normalized in float32, cast back, then scaled: Qwen's order."""
    normed = F.rms_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    return weight * normed.to(x.dtype)


def add_rms_norm(x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The residual sum x + delta, and its norm."""
    total = x + delta
    return total, rms_norm(total, weight, eps)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """NeoX rotation (halves, not interleaved pairs) of x [..., T, d]; cos/sin broadcast to x."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def qk_norm_rope(
    q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, cos: Tensor, sin: Tensor
) -> tuple[Tensor, Tensor]:
    """Per-head norm then RoPE of q [B, T, h, d] and k [B, T, kv, d] -> [B, h, T, d], [B, kv, T, d];
    cos/sin [B, T, d] float32."""
    cos, sin = cos[:, None], sin[:, None]
    q = rotate(rms_norm(q, q_weight, eps).transpose(1, 2), cos, sin).to(q.dtype)
    k = rotate(rms_norm(k, k_weight, eps).transpose(1, 2), cos, sin).to(k.dtype)
    return q, k


def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    return F.silu(gate) * up


def snake_beta(x: Tensor, log_alpha: Tensor, log_beta: Tensor) -> Tensor:
    """The codec decoder's activation on time-major x [B, T, C]: x + sin²(x·e^alpha) / e^beta per
    channel. Eager it is five passes over the decoder's largest tensors; fused, one."""
    return x + (1.0 / (log_beta.exp() + 1e-9)) * torch.sin(x * log_alpha.exp()).pow(2)


def snake_beta_after(context: Tensor, x: Tensor, log_alpha: Tensor, log_beta: Tensor) -> Tensor:
    """[context, snake_beta(x)] along time ([B, c, C] and [B, T, C]): the input of the causal conv
    after the activation, written in the same pass."""
    return torch.cat([context, snake_beta(x, log_alpha, log_beta)], dim=1)


_fused = False


def enable_fusion() -> None:
    """Use compiled versions from now on (once per process; CUDA only, as CI has no compiler)."""
    global _fused, rms_norm, add_rms_norm, qk_norm_rope, silu_mul, snake_beta, snake_beta_after
    if _fused:
        return
    _fused = True
    # Each function meets several widths, dtypes and 0/1-sized dims (talker, predictor, codec
    # decoder): room for those variants, and eager instead of an error should a new one exceed it.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    fns = (rms_norm, add_rms_norm, qk_norm_rope, silu_mul, snake_beta, snake_beta_after)
    rms_norm, add_rms_norm, qk_norm_rope, silu_mul, snake_beta, snake_beta_after = (
        torch.compile(fn, dynamic=True) for fn in fns
    )
    log.info("decoder layers use fused elementwise kernels (torch.compile)")
