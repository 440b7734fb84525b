"""@fusable functions run compiled (`pointwise.compiled`: torch.compile, inductor's CPU backend
here, Triton on CUDA) give what they give eagerly: the same draws, the same KV writes and nothing
else written."""

import pytest
import torch

from voicewire.engine.config import SamplingParams
from voicewire.engine.kernels import pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import layers
from voicewire.engine.model.sampling import Draw, RowSampling, sample
from voicewire.engine.runtime.frame_step import choose_code0

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor touches torch.jit


def _rows() -> RowSampling:
    """Five rows: greedy, top-k 50, top-k 50 with top-p 0.8, top-k 5 at temperature 0.5, top-k 50."""
    params = [
        SamplingParams(do_sample=False),
        SamplingParams(),
        SamplingParams(top_p=0.8),
        SamplingParams(temperature=0.5, top_k=5),
        SamplingParams(top_k=50),
    ]
    rows = RowSampling.allocate(len(params), "cpu")
    for i, p in enumerate(params):
        rows.set(i, p)
    return rows


def test_a_fusable_function_is_itself_and_compiled_once() -> None:
    """The marker leaves the function as it is (called directly, it runs eagerly); its compiled
    twin is made on first use and kept."""
    x = torch.randn(3, 8)
    assert torch.equal(pointwise.silu_mul(x, x), torch.nn.functional.silu(x) * x)
    twin = pointwise.compiled(pointwise.silu_mul)
    assert twin is not pointwise.silu_mul and pointwise.compiled(pointwise.silu_mul) is twin


def test_compiled_draws_equal_eager_draws() -> None:
    gen = torch.Generator().manual_seed(5)
    logits = 3 * torch.randn(5, 3072, generator=gen)
    seeds = torch.arange(5, dtype=torch.long) * 977 + 13
    params = _rows()
    for draw in (Draw.TOP_K, Draw.FULL):
        for counter in range(4):
            counters = torch.full((5,), counter, dtype=torch.long)
            compiled = pointwise.compiled(sample)(logits, params, seeds, counters, draw)
            eager = sample(logits, params, seeds, counters, draw)
            assert torch.equal(compiled, eager), (draw, counter)
    assert (sample, False) in pointwise._compiled


def test_compiled_code0_choice_equals_eager() -> None:
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(5, 3072, generator=gen)
    seen = torch.rand(5, 3072, generator=gen) < 0.01
    penalty = torch.tensor([1.05, 1.0, 1.2, 1.05, 1.05])
    banned = torch.zeros(3072, dtype=torch.bool)
    banned[2048:] = True
    banned[2150] = False
    no_eos = torch.zeros(5, 3072, dtype=torch.bool)
    no_eos[[0, 3], 2150] = True
    seeds, counters = torch.arange(5, dtype=torch.long), torch.full((5,), 16, dtype=torch.long)
    args = (logits, seen, penalty, banned, no_eos, _rows(), seeds, counters, Draw.TOP_K)
    assert torch.equal(pointwise.compiled(choose_code0)(*args), choose_code0(*args))


def test_compiled_rope_and_kv_write_equal_eager_and_touch_only_their_positions() -> None:
    gen = torch.Generator().manual_seed(7)
    b, t, h, kv, d, length = 3, 2, 4, 2, 16, 12
    q, k, v = (torch.randn(b, t, n, d, generator=gen) for n in (h, kv, kv))
    q_weight, k_weight = 1 + 0.1 * torch.randn(d, generator=gen), 1 + 0.1 * torch.randn(d, generator=gen)
    positions = torch.tensor([[0, 1], [5, 6], [10, 11]])
    cos, sin = layers.rope_tables(d, 1e6, positions)
    before = torch.randn(2, 4, kv, length, d, generator=gen)  # 4 slots, rows 0..2 stepped

    def run(fn):
        cache = before.clone()
        out = fn(q, k, v, q_weight, k_weight, 1e-6, cos, sin, positions, cache[0, :b], cache[1, :b])
        return out, cache

    compiled, compiled_cache = run(pointwise.compiled(pointwise.qk_norm_rope_store))
    eager, eager_cache = run(pointwise.qk_norm_rope_store)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled_cache, eager_cache, rtol=1e-5, atol=1e-5)
    written = torch.zeros(length, dtype=torch.bool).repeat(4, 1)
    for row in range(b):
        written[row, positions[row]] = True
    untouched = ~written[:, None, :, None].expand(4, kv, length, d)
    for i in range(2):
        assert torch.equal(compiled_cache[i][untouched], before[i][untouched])
    assert torch.equal(compiled_cache[:, 3], before[:, 3])
    # The new values are where they belong: v as given, at each row's own positions.
    assert torch.equal(compiled_cache[1, 1, :, 5], v[1, 0])


def test_compiled_attention_inputs_and_frame_embedding_equal_eager() -> None:
    gen = torch.Generator().manual_seed(8)
    positions = torch.tensor([[3], [0], [7]])
    cos_table, sin_table = layers.rope_tables(16, 1e6, torch.arange(10))
    args = (positions, cos_table, sin_table, 10, 2, torch.float32)
    for got, want in zip(
        pointwise.compiled(layers.attention_inputs)(*args), layers.attention_inputs(*args), strict=True
    ):
        assert torch.equal(got, want)
    _, _, bias = layers.attention_inputs(*args)
    assert bias.shape == (3, 1, 2, 10)
    assert torch.equal(torch.isfinite(bias[2, 0, 1]), torch.arange(10) <= 7)
    codes = torch.randint(0, 40, (3, 16), generator=gen)
    tables = [torch.randn(40, 8, generator=gen) for _ in range(16)]
    fused_rows = pointwise.compiled(pointwise.frame_embedding)(codes, tables[0], tables[1:])
    eager_rows = pointwise.frame_embedding(codes, tables[0], tables[1:])
    torch.testing.assert_close(fused_rows, eager_rows, rtol=1e-6, atol=1e-6)
    assert torch.allclose(eager_rows[1], sum(tables[k][codes[1, k]] for k in range(16)), atol=1e-5)


def test_compiled_few_row_attention_equals_sdpa() -> None:
    """With compiled kernels, decode rows (T = 1 or 2, two query heads per key head) take the matmul-softmax path;
    it gives SDPA's output under the causal bias, fully masked slots included."""
    gen = torch.Generator().manual_seed(9)
    b, h, kv, d, length = 3, 4, 2, 16, 24
    k, v = torch.randn(2, b, kv, length, d, generator=gen)
    for t in (1, 2):
        q = torch.randn(b, h, t, d, generator=gen)
        positions = torch.tensor([[0, 1], [9, 10], [21, 22]])[:, :t]
        cos_table, sin_table = layers.rope_tables(d, 1e6, torch.arange(length))
        _, _, bias = layers.attention_inputs(positions, cos_table, sin_table, length, h // kv, q.dtype)
        rows = q.reshape(b, kv, -1, d)
        want = torch.nn.functional.scaled_dot_product_attention(rows, k, v, attn_mask=bias)
        got = layers.grouped_attention(q, k, v, bias, Kernels(compiled=True))
        torch.testing.assert_close(got, want.reshape(b, h, t, d), rtol=1e-5, atol=1e-5)
        # Row 0 sees slot 0 alone: its value row, exactly weighted 1.
        torch.testing.assert_close(got[0, :2, 0], v[0, 0, 0].expand(2, d), rtol=1e-6, atol=1e-6)
    assert (layers.few_row_attention, False) in pointwise._compiled
