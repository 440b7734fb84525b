"""The fused layer's Triton kernels give what the unfused layer gives: the same projections, the
same KV writes and nothing else written, the same attention, and whole stacks that agree. On a
GPU they run compiled; without one, in Triton's interpreter on CPU tensors (see conftest)."""

import pytest
import torch

from voicewire.engine.kernels import fused_layer, pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.layers import (
    DecoderConfig,
    DecoderStack,
    KVCache,
    attention_inputs,
    grouped_attention,
    rope_tables,
    scaled_init_,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# head_dim 16: the smallest tile tl.dot takes. 96 is not a power of two: masked tails.
CFG = DecoderConfig(
    hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
    rms_norm_eps=1e-6, rope_theta=10000.0,
)  # fmt: skip


@pytest.mark.parametrize("k", [96, 1100])  # one K block; several, each loaded a block ahead, and a tail
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_gemv_equals_norm_then_matmul(rows: int, k: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    x, delta = torch.randn(rows, k, generator=gen), torch.randn(rows, k, generator=gen)
    weight = torch.randn(40, k, generator=gen) / k**0.5
    norm = 1 + 0.1 * torch.randn(k, generator=gen)
    x, delta, weight, norm = (t.to(DEVICE) for t in (x, delta, weight, norm))

    out, total = fused_layer.gemv(x, weight)
    torch.testing.assert_close(out, x @ weight.T)
    assert total is None

    out, _ = fused_layer.gemv(x, weight, norm=norm, eps=1e-6)
    torch.testing.assert_close(out, pointwise.rms_norm(x, norm, 1e-6) @ weight.T)

    out, total = fused_layer.gemv(x, weight, delta, norm, 1e-6, gated=True)
    want_total, h = pointwise.add_rms_norm(x, delta, norm, 1e-6)
    torch.testing.assert_close(total, want_total)
    torch.testing.assert_close(out, pointwise.silu_mul(*(h @ weight.T).split(20, dim=-1)))
    assert out.shape == (rows, 20)


def test_gemv_in_bfloat16_rounds_like_the_unfused_layer() -> None:
    gen = torch.Generator().manual_seed(9)
    x, delta = (torch.randn(2, 1, 128, generator=gen).bfloat16() for _ in range(2))
    weight = (torch.randn(64, 128, generator=gen) / 11).bfloat16()
    norm = (1 + 0.1 * torch.randn(128, generator=gen)).bfloat16()
    x, delta, weight, norm = (t.to(DEVICE) for t in (x, delta, weight, norm))
    out, total = fused_layer.gemv(x, weight, delta, norm, 1e-6)
    want_total, h = pointwise.add_rms_norm(x, delta, norm, 1e-6)
    # The same sum. Triton's interpreter casts to bfloat16 by truncation, CUDA rounds to nearest.
    torch.testing.assert_close(total, want_total, atol=0, rtol=2**-7)
    assert out.shape == (2, 1, 64) and out.dtype == torch.bfloat16
    # Only the order of the float32 sums differs: within one bfloat16 step of the result.
    torch.testing.assert_close(out, (h.float() @ weight.float().T).bfloat16(), atol=0.02, rtol=0.01)


def test_gemv_refuses_what_it_cannot_do() -> None:
    x = torch.randn(9, 16)
    with pytest.raises(ValueError, match="at most 8 rows"):
        fused_layer.gemv(x, torch.randn(4, 16))
    with pytest.raises(ValueError, match="does not fit input width 16"):
        fused_layer.gemv(x[:2], torch.randn(4, 12))
    with pytest.raises(ValueError, match="only taken ahead of a norm"):
        fused_layer.gemv(x[:2], torch.randn(4, 16), delta=x[:2])


def _unfused_attention(qkv, q_norm, k_norm, positions, k_cache, v_cache, span, cos_table, sin_table):
    b, t, _ = qkv.shape
    h, kv, d = CFG.num_heads, CFG.num_kv_heads, CFG.head_dim
    q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
    cos, sin, bias = attention_inputs(positions, cos_table, sin_table, span, h // kv, qkv.dtype)
    q = pointwise.qk_norm_rope_store(
        q.reshape(b, t, h, d), k.reshape(b, t, kv, d), v.reshape(b, t, kv, d), q_norm, k_norm,
        CFG.rms_norm_eps, cos, sin, positions, k_cache, v_cache,
    )  # fmt: skip
    out = grouped_attention(q, k_cache[:, :, :span], v_cache[:, :, :span], bias, Kernels())
    return out.transpose(1, 2).reshape(b, t, -1)


# Each launch attention_launch picks (here, with 6 programs, the first): blocks of 64, 32 and 16 keys.
LAUNCHES = [None, fused_layer.AttentionLaunch(32, warps=1, stages=3), fused_layer.AttentionLaunch(16, 1, 2)]


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize(
    ("t", "span", "positions"), [(1, 80, [[3], [70], [41]]), (2, 48, [[0, 1], [20, 21], [46, 47]])]
)
def test_attention_equals_unfused_and_writes_only_its_positions(
    t: int, span: int, positions: list, tables: bool, launch: fused_layer.AttentionLaunch | None
) -> None:
    """RoPE from each row's gathered cos/sin, or read from the whole tables at the rows' positions;
    each block size of the key loop."""
    gen = torch.Generator().manual_seed(t)
    b, h, kv, d, length = 3, CFG.num_heads, CFG.num_kv_heads, CFG.head_dim, 80
    qkv = torch.randn(b, t, (h + 2 * kv) * d, generator=gen)
    q_norm, k_norm = 1 + 0.1 * torch.randn(d, generator=gen), 1 + 0.1 * torch.randn(d, generator=gen)
    k_cache, v_cache = (
        torch.randn(b, kv, length, d, generator=gen),
        torch.randn(b, kv, length, d, generator=gen),
    )
    pos = torch.tensor(positions)
    cos_table, sin_table = rope_tables(d, CFG.rope_theta, torch.arange(length))
    qkv, q_norm, k_norm, k_cache, v_cache, pos, cos_table, sin_table = (
        t.to(DEVICE) for t in (qkv, q_norm, k_norm, k_cache, v_cache, pos, cos_table, sin_table)
    )
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want = _unfused_attention(qkv, q_norm, k_norm, pos, want_k, want_v, span, cos_table, sin_table)

    cos, sin = (cos_table, sin_table) if tables else (cos_table[pos], sin_table[pos])
    out = fused_layer.attend(
        qkv, q_norm, k_norm, CFG.rms_norm_eps, cos, sin, pos, k_cache, v_cache, span, h, launch=launch
    )
    torch.testing.assert_close(k_cache, want_k)  # the new keys at their positions, all else untouched
    assert torch.equal(v_cache, want_v)
    torch.testing.assert_close(out, want)


def test_attention_reads_no_key_block_past_its_rows_position() -> None:
    """A row reads the cache up to the block that holds its own position, whatever the span: NaNs
    after that block (a sequence that failed there before) change nothing. Row 1 reaches the
    second block of 64 keys; rows 0 and 2 do not, and would be NaN if they read it."""
    gen = torch.Generator().manual_seed(5)
    b, h, kv, d, length, span = 3, CFG.num_heads, CFG.num_kv_heads, CFG.head_dim, 80, 80
    qkv = torch.randn(b, 1, (h + 2 * kv) * d, generator=gen).to(DEVICE)
    q_norm, k_norm = torch.ones(d, device=DEVICE), torch.ones(d, device=DEVICE)
    k_cache = torch.randn(b, kv, length, d, generator=gen).to(DEVICE)
    v_cache = torch.randn(b, kv, length, d, generator=gen).to(DEVICE)
    pos = torch.tensor([[3], [70], [41]], device=DEVICE)
    cos_table, sin_table = (t.to(DEVICE) for t in rope_tables(d, CFG.rope_theta, torch.arange(length)))
    want = _unfused_attention(
        qkv, q_norm, k_norm, pos, k_cache.clone(), v_cache.clone(), span, cos_table, sin_table
    )
    for row in (0, 2):
        k_cache[row, :, 64:] = float("nan")
        v_cache[row, :, 64:] = float("nan")
    out = fused_layer.attend(
        qkv, q_norm, k_norm, CFG.rms_norm_eps, cos_table, sin_table, pos, k_cache, v_cache, span, h
    )
    assert out.isfinite().all()
    torch.testing.assert_close(out, want)


@pytest.mark.parametrize(
    ("programs", "span", "launch"),
    [
        (8, 200, (64, 4, 3)),  # one row of 8 key heads: few programs, long blocks on four warps
        (8, 20, (32, 4, 3)),  # no block longer than the span needs
        (127, 200, (64, 4, 3)),
        (128, 200, (32, 1, 3)),  # 16 rows of 8 key heads
        (1023, 200, (32, 1, 3)),
        (1024, 200, (16, 1, 2)),  # 128 rows of 8: short blocks, more programs resident
        (4096, 16, (16, 1, 2)),  # the code predictor's 16 positions at 512 rows
    ],
)
def test_attention_launch_takes_shorter_blocks_on_fewer_warps_as_programs_grow(
    programs: int, span: int, launch: tuple[int, int, int]
) -> None:
    assert fused_layer.attention_launch(programs, span) == fused_layer.AttentionLaunch(*launch)


def test_attention_refuses_a_span_past_the_cache_and_too_many_query_rows() -> None:
    qkv = torch.randn(1, 1, 8 * 16)
    cache = torch.zeros(1, 2, 16, 16)
    args = (
        torch.ones(16),
        torch.ones(16),
        1e-6,
        torch.ones(1, 1, 16),
        torch.zeros(1, 1, 16),
        torch.zeros(1, 1, dtype=torch.long),
    )
    with pytest.raises(
        ValueError, match=r"cos/sin \(1, 16\) fit neither rows \(1, 1, 16\) nor tables \(16, 16\)"
    ):
        fused_layer.attend(
            qkv, args[0], args[1], 1e-6, torch.ones(1, 16), torch.ones(1, 16), args[5], cache, cache, 8, 4
        )
    with pytest.raises(ValueError, match="span 17 exceeds the cache length 16"):
        fused_layer.attend(qkv, *args, cache, cache.clone(), 17, 4)
    with pytest.raises(ValueError, match="exceed 16"):
        fused_layer.attend(
            torch.randn(1, 3, 40 * 16), *args, torch.zeros(1, 4, 16, 16), torch.zeros(1, 4, 16, 16), 8, 32
        )


def test_stack_forward_equals_the_unfused_stack() -> None:
    stack = DecoderStack(CFG)
    scaled_init_(stack, torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(4)
    stack.to(DEVICE)
    cache = stack.new_cache(2, 32)
    with torch.inference_mode():
        # A prompt of 6 positions, then a one-position step and a two-position one (the code
        # predictor's first), each run both ways from the same cache.
        prompt = torch.randn(2, 6, CFG.hidden_size, generator=gen).to(DEVICE)
        stack(prompt, torch.arange(6, device=DEVICE).expand(2, 6), cache)
        for positions in (torch.tensor([[6], [6]]), torch.tensor([[6, 7], [6, 7]])):
            positions = positions.to(DEVICE)
            x = torch.randn(2, positions.shape[1], CFG.hidden_size, generator=gen).to(DEVICE)
            fused_cache = KVCache(cache.k.clone(), cache.v.clone(), cache.cos, cache.sin, span=16)
            unfused_cache = KVCache(cache.k.clone(), cache.v.clone(), cache.cos, cache.sin, span=16)
            got = fused_layer.stack_forward(stack, x, positions, fused_cache)
            want = stack(x, positions, unfused_cache)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(fused_cache.k, unfused_cache.k)
            torch.testing.assert_close(fused_cache.v, unfused_cache.v)


def test_last_logits_fold_the_final_norm_into_the_head() -> None:
    """The code predictor's head on the fused path: the stack's layers, then the final norm inside
    the head's GEMV, against the unfused stack, its norm and the head's matmul, from the same cache."""
    stack = DecoderStack(CFG)
    scaled_init_(stack, torch.Generator().manual_seed(5))
    head = torch.nn.Linear(CFG.hidden_size, 40, bias=False)
    scaled_init_(head, torch.Generator().manual_seed(6))
    gen = torch.Generator().manual_seed(7)
    stack.to(DEVICE), head.to(DEVICE)
    cache = stack.new_cache(2, 32)
    with torch.inference_mode():
        for positions in (torch.tensor([[0, 1], [0, 1]]), torch.tensor([[2], [2]])):
            positions = positions.to(DEVICE)
            x = torch.randn(2, positions.shape[1], CFG.hidden_size, generator=gen).to(DEVICE)
            fused_cache = KVCache(cache.k.clone(), cache.v.clone(), cache.cos, cache.sin, span=16)
            got = fused_layer.stack_last_logits(stack, x, positions, fused_cache, head.weight)
            want = head(stack(x, positions, cache)[:, -1])
            assert got.shape == (2, 40)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(fused_cache.k, cache.k)


def test_the_fused_path_is_for_cuda_only() -> None:
    assert not fused_layer.applies(torch.zeros(1, 1, 8), CFG)


@pytest.mark.parametrize("bias", [False, True])
def test_decoder_stack_dispatches_last_logits(monkeypatch: pytest.MonkeyPatch, bias: bool) -> None:
    """Where the fused path takes a step, `DecoderStack.last_logits` folds the norm into a bias-free
    head; a biased head runs the fused stack, then the head. Both give the unfused logits."""
    stack = DecoderStack(CFG)
    scaled_init_(stack, torch.Generator().manual_seed(8))
    head = torch.nn.Linear(CFG.hidden_size, 40, bias=bias)
    scaled_init_(head, torch.Generator().manual_seed(9))
    stack.to(DEVICE), head.to(DEVICE)
    cache = stack.new_cache(2, 32)
    positions = torch.tensor([[0, 1], [0, 1]], device=DEVICE)
    x = torch.randn(2, 2, CFG.hidden_size, generator=torch.Generator().manual_seed(10)).to(DEVICE)
    with torch.inference_mode():
        want = head(stack(x, positions, KVCache(cache.k.clone(), cache.v.clone(), cache.cos, cache.sin)))
        calls = []
        for name in ("stack_forward", "stack_last_logits"):
            real = getattr(fused_layer, name)
            monkeypatch.setattr(
                fused_layer, name, lambda *a, real=real, name=name: calls.append(name) or real(*a)
            )
        Kernels(fused_layer=True).bind(stack)
        monkeypatch.setattr(fused_layer, "applies", lambda x, cfg: True)
        got = stack.last_logits(x, positions, cache, head)
    assert calls == (["stack_forward"] if bias else ["stack_last_logits"])
    torch.testing.assert_close(got, want[:, -1])
