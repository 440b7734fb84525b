"""Qwen3 decoder pieces shared by the talker and the code predictor, with a static KV cache.

Shapes: B batch rows (stream slots), T new positions, L cache length, H hidden, h heads, d head_dim.
Every row carries its own positions, so rows at different points of their utterance share a step.
Each module that calls a fusable function or a kernel holds the engine's `Kernels` (engine/kernels/choice.py)
as its `kernels` field: all off until the engine binds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.choice import Kernels


@dataclass
class DecoderConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def from_dict(cls, d: dict) -> DecoderConfig:
        return cls(
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_layers=d["num_hidden_layers"],
            num_heads=d["num_attention_heads"],
            num_kv_heads=d["num_key_value_heads"],
            head_dim=d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"],
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=d.get("rope_theta", 10000.0),
        )


@dataclass
class KVCache:
    """Keys and values for every layer, allocated once: [layers, B, kv_heads, L, d], with the RoPE
    cos/sin of every cache position [L, d] (float32), looked up per step instead of recomputed.

    `span`: attention reads only positions [0, span) of each row (None: all of them). Writes go
    to the whole rows, which stay contiguous per layer (a fused write into a strided view would
    copy the whole cache)."""

    k: Tensor
    v: Tensor
    cos: Tensor
    sin: Tensor
    span: int | None = None

    @classmethod
    def allocate(
        cls, cfg: DecoderConfig, batch: int, length: int, device: torch.device, dtype: torch.dtype
    ) -> KVCache:
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, length, cfg.head_dim)
        cos, sin = rope_tables(cfg.head_dim, cfg.rope_theta, torch.arange(length, device=device))
        return cls(
            torch.zeros(shape, device=device, dtype=dtype),
            torch.zeros(shape, device=device, dtype=dtype),
            cos,
            sin,
        )

    @property
    def length(self) -> int:
        """The positions attention reads."""
        return self.k.shape[3] if self.span is None else self.span

    def rows(self, start: int, stop: int, span: int | None = None) -> KVCache:
        """A view on rows [start, stop) that, with `span`, attends to positions [0, span) only.
        Writes through the view land in this cache."""
        return KVCache(self.k[:, start:stop], self.v[:, start:stop], self.cos, self.sin, span)

    def take(self, rows: Tensor, span: int | None = None) -> KVCache:
        """A copy of the given rows [n] (any order, repeats allowed), of their first `span`
        positions only (None: all): the copy holds those positions, and attention reads them all."""
        k, v = (self.k, self.v) if span is None else (self.k[:, :, :, :span], self.v[:, :, :, :span])
        return KVCache(k[:, rows], v[:, rows], self.cos, self.sin)

    def put(self, rows: Tensor, positions: Tensor, part: KVCache) -> None:
        """Write back what `part` (from `take(rows)`) holds at positions [n, T] of each of its rows."""
        picked = torch.arange(len(rows), device=rows.device)
        here = (slice(None), rows[:, None], slice(None), positions)
        there = (slice(None), picked[:, None], slice(None), positions)
        self.k[here] = part.k[there]
        self.v[here] = part.v[there]


def rope_tables(head_dim: int, theta: float, positions: Tensor) -> tuple[Tensor, Tensor]:
    """NeoX RoPE cos/sin for integer positions [B, T] -> [B, T, d] (float32)."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.kernels = Kernels()

    def forward(self, x: Tensor) -> Tensor:
        return self.kernels.fuse(pointwise.rms_norm)(x, self.weight, self.eps)


class StackedLinear(nn.Linear):
    """Several bias-free projections of one input as a single GEMM: fewer, larger kernels per step.

    `parts` maps each projection's checkpoint name to its output width, in order. Checkpoints keep
    the projections apart; `weights.checkpoint_tensors` presents this weight as those parts."""

    def __init__(self, in_features: int, parts: dict[str, int]) -> None:
        super().__init__(in_features, sum(parts.values()), bias=False)
        self.parts = dict(parts)
        self.widths = list(parts.values())

    def split(self, y: Tensor) -> tuple[Tensor, ...]:
        """The output [..., sum of widths] as one view per part."""
        # Tensor.split's Python wrapper costs more than the views at a frame's sizes.
        return y.split_with_sizes(self.widths, dim=-1)


def weight_parts(linear: nn.Linear) -> tuple[Tensor, ...]:
    """A linear's weight as checkpoints hold it: itself, or a StackedLinear's parts (views)."""
    if isinstance(linear, StackedLinear):
        return linear.weight.split(list(linear.parts.values()))
    return (linear.weight,)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = StackedLinear(cfg.hidden_size, {"q_proj": q, "k_proj": kv, "v_proj": kv})
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.kernels = Kernels()

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        positions: Tensor,
        bias: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        span: int,
    ) -> Tensor:
        """x [B, T, H]; the new keys/values go to each row's positions [B, T] of the caches
        [B, kv, L, d], and attention reads their first `span` positions."""
        b, t, _ = x.shape
        d = self.cfg.head_dim
        qkv = self.qkv_proj(x)
        kernels = self.kernels
        if kernels.fused_layer:
            from voicewire.engine.kernels import fused_layer  # Triton, which CUDA builds of torch carry

            if fused_layer.attends(x, self.cfg):
                out = fused_layer.layer_attention(self, qkv, cos, sin, positions, k_cache, v_cache, span)
                return self.o_proj(out)
        q, k, v = self.qkv_proj.split(qkv)
        q = kernels.fuse(pointwise.qk_norm_rope_store)(
            q.view(b, t, -1, d),
            k.view(b, t, -1, d),
            v.view(b, t, -1, d),
            self.q_norm.weight,
            self.k_norm.weight,
            self.q_norm.eps,
            cos,
            sin,
            positions,
            k_cache,
            v_cache,
        )
        out = grouped_attention(q, k_cache[:, :, :span], v_cache[:, :, :span], bias, kernels)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


# Decode steps give each key head g x T = 2 (talker) to 4 (predictor prefill) query rows. SDPA's
# kernels tile 64+ rows, so at large batches most of their work is padding: on an H100 (0.6B,
# batch 256) matmul + softmax + matmul took 111 us against SDPA's 129 us over 256 keys, 25 against
# 68 us over the predictor's 16.
FEW_ROWS = 8


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, kernels: Kernels) -> Tensor:
    """GQA without copying keys: q [B, h, T, d] over k/v [B, kv, L, d] -> [B, h, T, d], with an
    additive mask `bias` [B, 1, g x T, L] from `attention_inputs`.

    The g = h / kv query heads of a key head become g x T query rows of that head, so attention
    runs on the cache as it is (SDPA's enable_gqa falls back to repeating the whole cache). With
    compiled kernels, a few rows take `few_row_attention` instead of SDPA."""
    b, h, t, d = q.shape
    rows = q.reshape(b, k.shape[1], -1, d)
    if kernels.compiled and rows.shape[2] <= FEW_ROWS:
        out = kernels.fuse(few_row_attention)(rows, k, v, bias)
    else:
        out = F.scaled_dot_product_attention(rows, k, v, attn_mask=bias)
    return out.reshape(b, h, t, d)


@pointwise.fusable
def few_row_attention(rows: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """`grouped_attention` as two matmuls around a softmax that compiles, with the mask, into one
    kernel. Scores come out of the matmul in the cache's dtype (as in eager attention), and the
    softmax runs in float32."""
    scores = torch.matmul(rows, k.transpose(-1, -2)).float() * rows.shape[-1] ** -0.5 + bias
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    weights = weights / weights.sum(-1, keepdim=True)
    return torch.matmul(weights.to(v.dtype), v)


AttentionInputs = tuple[Tensor, Tensor, Tensor]  # RoPE cos [B, T, d], sin [B, T, d], mask bias


@pointwise.fusable
def attention_inputs(
    positions: Tensor, cos_table: Tensor, sin_table: Tensor, length: int, groups: int, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor]:
    """What every layer of one forward shares, for rows at positions [B, T] over `length` cache
    positions: RoPE cos and sin [B, T, d], and the causal mask as the additive bias of
    `grouped_attention` [B, 1, groups x T, length] (0 where a query sees the slot, -inf elsewhere).
    Made once per forward: SDPA would turn a boolean mask into this bias inside every call."""
    b, t = positions.shape
    slots = torch.arange(length, device=positions.device)
    visible = slots[None, None, :] <= positions[:, :, None]
    bias = torch.zeros(visible.shape, device=positions.device, dtype=dtype).masked_fill_(
        ~visible, float("-inf")
    )
    bias = bias[:, None, None].expand(b, 1, groups, t, length).reshape(b, 1, groups * t, length)
    return cos_table[positions], sin_table[positions], bias


class MLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = StackedLinear(hidden, {"gate_proj": intermediate, "up_proj": intermediate})
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.kernels = Kernels()

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj.split(self.gate_up_proj(x))
        return self.down_proj(self.kernels.fuse(pointwise.silu_mul)(gate, up))


class LayerScale(nn.Module):
    """Per-channel residual-branch scale (the codec transformers): x + scale * branch, in one pass."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))
        self.kernels = Kernels()

    def forward(self, x: Tensor, branch: Tensor) -> Tensor:
        return self.kernels.fuse(pointwise.scaled_add)(x, self.scale, branch)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.kernels = Kernels()

    def forward(
        self,
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
        """The residual stream x [B, T, H] and the previous layer's output `delta` still to be
        added (None before the first layer) -> (x, this layer's output still to be added): each
        residual sum runs in the kernel of the norm after it."""
        add_rms_norm = self.kernels.fuse(pointwise.add_rms_norm)
        norm = self.input_layernorm
        if delta is None:
            h = norm(x)
        else:
            x, h = add_rms_norm(x, delta, norm.weight, norm.eps)
        attn = self.self_attn(h, cos, sin, positions, bias, k_cache, v_cache, span)
        norm = self.post_attention_layernorm
        x, h = add_rms_norm(x, attn, norm.weight, norm.eps)
        return x, self.mlp(h)


class DecoderStack(nn.Module):
    """Layers plus the final norm; subclasses add their embeddings under the same module."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.kernels = Kernels()

    def new_cache(self, batch: int, length: int) -> KVCache:
        weight = self.norm.weight
        return KVCache.allocate(self.cfg, batch, length, weight.device, weight.dtype)

    def _fused_layer(self, x: Tensor) -> ModuleType | None:
        """engine.fused_layer when its kernels take a step of x [B, T, H] (`Kernels.fused_layer`,
        and a shape they handle), else None."""
        if not self.kernels.fused_layer:
            return None
        from voicewire.engine.kernels import fused_layer  # Triton, which CUDA builds of torch carry

        return fused_layer if fused_layer.applies(x, self.cfg) else None

    def attention_inputs(self, positions: Tensor, cache: KVCache, dtype: torch.dtype) -> AttentionInputs:
        """The RoPE cos, sin and mask bias of rows at positions [B, T] over `cache` (`attention_inputs`)."""
        groups = self.cfg.num_heads // self.cfg.num_kv_heads
        return self.kernels.fuse(attention_inputs)(
            positions, cache.cos, cache.sin, cache.length, groups, dtype
        )

    def forward(
        self, x: Tensor, positions: Tensor, cache: KVCache, inputs: AttentionInputs | None = None
    ) -> Tensor:
        """x [B, T, H] at positions [B, T] -> normed hidden states [B, T, H]. `inputs`: this call's
        `attention_inputs`, if the caller made them beforehand (ignored by the fused layers)."""
        fused = self._fused_layer(x)
        if fused is not None:
            return fused.stack_forward(self, x, positions, cache)
        span = cache.length
        cos, sin, bias = inputs if inputs is not None else self.attention_inputs(positions, cache, x.dtype)
        delta = None
        for i, layer in enumerate(self.layers):
            x, delta = layer(x, delta, cos, sin, positions, bias, cache.k[i], cache.v[i], span)
        if delta is None:
            return self.norm(x)
        return self.kernels.fuse(pointwise.add_rms_norm)(x, delta, self.norm.weight, self.norm.eps)[1]

    def last_logits(
        self,
        x: Tensor,
        positions: Tensor,
        cache: KVCache,
        head: nn.Linear,
        inputs: AttentionInputs | None = None,
    ) -> Tensor:
        """The last position's logits [B, V] through `head`, for x [B, T, H] at positions [B, T].
        On the fused path, with a bias-free head, the final norm runs inside the head's GEMV."""
        fused = self._fused_layer(x)
        if fused is not None and head.bias is None:
            return fused.stack_last_logits(self, x, positions, cache, head.weight)
        return head(self(x, positions, cache, inputs)[:, -1])


def scaled_init_(module: nn.Module, gen: torch.Generator) -> None:
    """Fan-in-scaled linears, unit-variance embeddings, norms near one (random checkpoints)."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.Linear):
                for weight in weight_parts(sub):
                    weight.copy_(torch.randn(weight.shape, generator=gen) / sub.in_features**0.5)
                if sub.bias is not None:
                    sub.bias.copy_(0.02 * torch.randn(sub.bias.shape, generator=gen))
            elif isinstance(sub, nn.Embedding):
                sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen))
            elif isinstance(sub, RMSNorm):
                sub.weight.copy_(1.0 + 0.1 * torch.randn(sub.weight.shape, generator=gen))
