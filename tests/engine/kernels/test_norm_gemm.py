"""The normed projections as Triton GEMMs give what the unfused layer gives: the same residual sums,
the same projections within a step of the dtype, and whole stacks that agree, prompts and steps.
On a GPU they run compiled; without one, in Triton's interpreter on CPU tensors (see conftest)."""

import pytest
import torch

from tests.engine.kernels.test_fused_layer import CFG, DEVICE
from voicewire.engine.kernels import norm_gemm, pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.layers import DecoderStack, KVCache, scaled_init_


@pytest.mark.parametrize("k", [64, 200])  # one K block; several, with a masked tail
@pytest.mark.parametrize("rows", [3, 70])  # one row block, short; two, the second short
def test_norm_gemm_equals_norm_then_matmul(rows: int, k: int) -> None:
    gen = torch.Generator().manual_seed(rows + k)
    x, delta = torch.randn(rows, k, generator=gen), torch.randn(rows, k, generator=gen)
    weight = torch.randn(180, k, generator=gen) / k**0.5  # 180 columns: a masked column block
    norm = 1 + 0.1 * torch.randn(k, generator=gen)
    x, delta, weight, norm = (t.to(DEVICE) for t in (x, delta, weight, norm))

    out, total = norm_gemm.norm_gemm(x, weight, norm, 1e-6)
    torch.testing.assert_close(out, pointwise.rms_norm(x, norm, 1e-6) @ weight.T)
    assert total is None and out.shape == (rows, 180)

    out, total = norm_gemm.norm_gemm(x, weight, norm, 1e-6, delta, gated=True)
    want_total, h = pointwise.add_rms_norm(x, delta, norm, 1e-6)
    assert total is not None
    torch.testing.assert_close(total, want_total)
    torch.testing.assert_close(out, pointwise.silu_mul(*(h @ weight.T).split(90, dim=-1)))
    assert out.shape == (rows, 90)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="Triton's interpreter has no bfloat16 tl.dot")
def test_norm_gemm_in_bfloat16_rounds_like_the_unfused_layer() -> None:
    gen = torch.Generator().manual_seed(11)
    x, delta = (torch.randn(4, 3, 128, generator=gen).bfloat16() for _ in range(2))
    weight = (torch.randn(192, 128, generator=gen) / 11).bfloat16()
    norm = (1 + 0.1 * torch.randn(128, generator=gen)).bfloat16()
    x, delta, weight, norm = (t.to(DEVICE) for t in (x, delta, weight, norm))
    out, total = norm_gemm.norm_gemm(x, weight, norm, 1e-6, delta)
    want_total, h = pointwise.add_rms_norm(x, delta, norm, 1e-6)
    torch.testing.assert_close(total, want_total, atol=0, rtol=0)
    assert out.shape == (4, 3, 192) and out.dtype == torch.bfloat16
    # The normed rows round before 1/rms, not after: within a bfloat16 step of the result or two.
    torch.testing.assert_close(out, (h.float() @ weight.float().T).bfloat16(), atol=0.03, rtol=0.02)


def test_norm_gemm_refuses_what_does_not_fit() -> None:
    x = torch.zeros(3, 64, device=DEVICE)
    with pytest.raises(ValueError, match=r"weight \(40, 32\) and norm \(64,\) do not fit input width 64"):
        norm_gemm.norm_gemm(x, torch.zeros(40, 32, device=DEVICE), torch.ones(64, device=DEVICE), 1e-6)
    with pytest.raises(ValueError, match="gated=True"):
        norm_gemm.norm_gemm(
            x, torch.zeros(41, 64, device=DEVICE), torch.ones(64, device=DEVICE), 1e-6, gated=True
        )
    with pytest.raises(ValueError, match="must be contiguous"):
        norm_gemm.norm_gemm(x, torch.zeros(64, 40, device=DEVICE).T, torch.ones(64, device=DEVICE), 1e-6)


def test_tiles_take_64_rows_a_block_for_steps_and_128_for_prefills() -> None:
    assert norm_gemm.tiles(192, gated=False) == norm_gemm.Tiles(64, 128, 64, warps=4, stages=3)
    assert norm_gemm.tiles(256, gated=True) == norm_gemm.Tiles(64, 64, 64, warps=4, stages=3)
    assert norm_gemm.tiles(4096, gated=False) == norm_gemm.Tiles(128, 128, 64, warps=8, stages=3)


def test_a_stack_with_norm_gemm_equals_the_unfused_stack() -> None:
    """`Kernels.norm_gemm` bound: every layer's normed projections go through `norm_gemm` (a
    prompt of 3 rows x 6 positions, then a one-position step of 3 rows), with the same outputs
    and the same keys and values written as the unfused stack from the same cache."""
    stack = DecoderStack(CFG)
    scaled_init_(stack, torch.Generator().manual_seed(12))
    gen = torch.Generator().manual_seed(13)
    stack.to(DEVICE)
    cache = stack.new_cache(3, 32)
    calls = []
    launch = norm_gemm.norm_gemm

    def counted(*args, **kwargs):
        calls.append(kwargs.get("gated", False))
        return launch(*args, **kwargs)

    with torch.inference_mode(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(norm_gemm, "norm_gemm", counted)
        for positions in (torch.arange(6).expand(3, 6), torch.tensor([[6], [6], [6]])):
            positions = positions.to(DEVICE)
            x = torch.randn(3, positions.shape[1], CFG.hidden_size, generator=gen).to(DEVICE)
            fused_cache = KVCache(cache.k.clone(), cache.v.clone(), cache.cos, cache.sin, span=16)
            Kernels(norm_gemm=True).bind(stack)
            got = stack(x, positions, fused_cache)
            Kernels().bind(stack)
            want = stack(x, positions, cache)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(fused_cache.k, cache.k)
            torch.testing.assert_close(fused_cache.v, cache.v)
    assert calls == [False, True] * CFG.num_layers * 2  # q/k/v, then gate/up, in each layer, twice
