"""The decoder's window attention kernel gives what the decoder's eager attention gives: the same
output over each row's carried window and the chunk, and the same next window written back, rows
elsewhere untouched. On a GPU it runs compiled; without one, in Triton's interpreter on CPU
tensors (see conftest). The decoder with it is tested on a GPU only, where it runs."""

import pytest
import torch
import torch.nn.functional as F

from tests.engine.kernels.decoders import random_decoder
from voicewire.engine.kernels import decoder_window
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import codec_decoder

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HEADS, HEAD_DIM, PAST = 2, 16, 71


def _eager(q, k, v, keys, values, rows, pos):  # type: ignore[no-untyped-def]
    """The decoder's eager attention (`codec_decoder.Attention.forward` after its projections),
    on copies of the state: (output [B, n, H * D], next keys, next values)."""
    b, n = q.shape[:2]
    keys, values = keys.clone(), values.clone()
    _, _, mask = codec_decoder.window_rope_and_mask(pos, n, PAST, HEAD_DIM, 10000.0, q.dtype)
    k_all = torch.cat([keys[rows], k.transpose(1, 2)], dim=2)
    v_all = torch.cat([values[rows], v.transpose(1, 2)], dim=2)
    keys[rows], values[rows] = k_all[:, :, -PAST:], v_all[:, :, -PAST:]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k_all, v_all, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, n, -1), keys, values


@pytest.mark.parametrize("frames", [1, 3, 8, 16])
def test_kernel_equals_the_eager_attention_and_shifts_the_window(frames: int) -> None:
    gen = torch.Generator().manual_seed(frames)
    slots, rows = 6, torch.tensor([4, 0, 2], device=DEVICE)
    pos = torch.tensor([0, 5, 300], device=DEVICE)  # a new stream, one 5 frames in, one long in
    keys, values = (torch.randn(slots, HEADS, PAST, HEAD_DIM, generator=gen).to(DEVICE) for _ in range(2))
    # q and k as the decoder's projections give them: views of [B, n, H * D]; v a slice of a wider
    # tensor, as a fused projection's would be (other row and time strides).
    q, k = (
        torch.randn(3, frames, HEADS * HEAD_DIM, generator=gen).to(DEVICE).view(3, frames, HEADS, HEAD_DIM)
        for _ in range(2)
    )
    wide = torch.randn(3, frames, 3 * HEADS * HEAD_DIM, generator=gen).to(DEVICE)
    v = wide[..., HEADS * HEAD_DIM : 2 * HEADS * HEAD_DIM].unflatten(-1, (HEADS, HEAD_DIM))
    want, want_keys, want_values = _eager(q, k, v, keys, values, rows, pos)
    before = keys.clone()
    got = decoder_window.attend(q, k, v, keys, values, rows, pos)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(keys, want_keys) and torch.equal(values, want_values)
    assert torch.equal(keys[[1, 3, 5]], before[[1, 3, 5]])  # other slots untouched


def test_what_the_kernel_takes() -> None:
    assert decoder_window.takes(8, 16, 16, 64)  # the released decoder's chunks
    assert not decoder_window.takes(17, 16, 16, 64)  # a longer chunk: the eager path
    assert not decoder_window.takes(8, 4, 2, 64)  # grouped heads
    assert not decoder_window.takes(8, 4, 4, 8)  # the tiny checkpoint's heads: too narrow
    q = torch.zeros(1, 20, HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match="not taken"):
        decoder_window.attend(
            q,
            q,
            q,
            torch.zeros(2, HEADS, PAST, HEAD_DIM),
            torch.zeros(2, HEADS, PAST, HEAD_DIM),
            torch.zeros(1, dtype=torch.long),
            torch.zeros(1, dtype=torch.long),
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the decoder takes the kernel on CUDA only")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoder_with_the_kernel_on_cuda(dtype: torch.dtype) -> None:
    """The real-size decoder with the kernel against it without, over two chunks: in float32 the
    same samples; in bfloat16 close to them."""
    decoder = random_decoder("0.6b", DEVICE, dtype)
    cfg = decoder.cfg
    codes = torch.randint(0, cfg.codebook_size, (16, 12, cfg.num_quantizers), device=DEVICE)
    outputs = []
    # cuDNN's float32 convs round their inputs to TF32 by default: a difference in the last bit
    # of the attention's output then moved the samples by 1e-3 on an H200. Full float32 here.
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for kernels in (Kernels(), Kernels(fused_window=True)):
            kernels.bind(decoder)
            state = decoder.new_state(16, DEVICE, dtype)
            parts = [decoder.decode_step(codes[:, :4], state), decoder.decode_step(codes[:, 4:], state)]
            outputs.append(torch.cat(parts, 1).float())
    tolerance = 1e-4 if dtype == torch.float32 else 0.05
    torch.testing.assert_close(outputs[1], outputs[0], rtol=tolerance, atol=tolerance)
