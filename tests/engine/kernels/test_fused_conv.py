"""The decoder's conv kernel gives what PyTorch's convs give: dilated causal convs over a carried
context, transposed convs cut as the decoder cuts them, with bias and residual. On a GPU it runs compiled; without one, in Triton's interpreter on CPU tensors (see
conftest). The decoder with the kernel chosen is tested on a GPU only, where it runs."""

import pytest
import torch
import torch.nn.functional as F

from voicewire.engine.kernels import fused_conv
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import codec_decoder
from voicewire.engine.model import random_checkpoint as checkpoints

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _exact(t: torch.Tensor) -> torch.Tensor:
    """A reference's input: float64 on the CPU (a GPU's float32 convs may round to TF32)."""
    return t.detach().cpu().double()


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


@pytest.mark.parametrize(
    ("rows", "frames", "c_in", "c_out", "taps", "dilation", "residual", "with_bias"),
    [
        (3, 10, 32, 48, 7, 3, True, True),  # a residual unit's dilated conv; C_out not a tile's multiple
        (2, 37, 96, 96, 7, 9, False, False),  # 96 channels (32 a step), a long context, no bias
        (1, 5, 64, 200, 3, 1, False, True),  # the pre-conv's three taps; rows of one stream
        (4, 1, 16, 16, 1, 1, True, True),  # a 1x1 conv into the residual stream, one frame
    ],
)
def test_conv_equals_torch_conv1d(
    rows: int, frames: int, c_in: int, c_out: int, taps: int, dilation: int, residual: bool, with_bias: bool
) -> None:
    context = (taps - 1) * dilation
    # x a time slice of a longer tensor, as the decoder's inputs may be: strided rows.
    x = _randn(rows, context + frames + 2, c_in, seed=frames)[:, 1 : 1 + context + frames]
    weight, bias = _randn(c_out, c_in, taps, seed=1) / (c_in * taps) ** 0.5, _randn(c_out, seed=2)
    res = _randn(rows, frames, c_out, seed=3) if residual else None
    got = fused_conv.conv(x, fused_conv.pack(weight, bias, dilation), res, with_bias)
    want = F.conv1d(_exact(x).mT, _exact(weight), _exact(bias) if with_bias else None, dilation=dilation).mT
    want = want + _exact(res) if res is not None else want
    assert got.shape == (rows, frames, c_out) and got.is_contiguous()
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("stride", "kernel", "frames"), [(4, 8, 9), (3, 6, 1), (2, 2, 5)])
def test_transposed_conv_equals_the_decoders_cut(stride: int, kernel: int, frames: int) -> None:
    """A transposed conv of kernel 2s (one carried frame) or s (none), as `CausalTransConv` cuts it."""
    c_in, c_out, rows = 32, 24, 2
    carried = 1 if kernel == 2 * stride else 0
    x = _randn(rows, carried + frames, c_in, seed=stride)
    weight, bias = _randn(c_in, c_out, kernel, seed=4) / c_in**0.5, _randn(c_out, seed=5)
    packed = fused_conv.pack_transposed(weight, bias, stride)
    got = fused_conv.conv(x, packed).view(rows, frames * stride, c_out)
    full = F.conv_transpose1d(_exact(x).mT, _exact(weight), _exact(bias), stride=stride).mT
    want = full[:, carried * stride : (carried + frames) * stride]
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)


def test_packed_weights_are_detached_from_the_modules_parameters() -> None:
    conv, trans = torch.nn.Conv1d(16, 16, 3), torch.nn.ConvTranspose1d(16, 16, 4, stride=2)
    for packed in (
        fused_conv.pack(conv.weight, conv.bias, 1),
        fused_conv.pack_transposed(trans.weight, trans.bias, 2),
    ):
        assert not packed.weight.requires_grad and packed.bias is not None and not packed.bias.requires_grad


def test_pack_transposed_refuses_other_kernels() -> None:
    with pytest.raises(ValueError, match="neither the stride"):
        fused_conv.pack_transposed(torch.zeros(16, 8, 5), None, 2)


def test_bad_inputs_get_clear_errors() -> None:
    packed = fused_conv.pack(torch.zeros(16, 16, 3), None, 2)  # context 4
    x = torch.zeros(1, 6, 16, device=DEVICE)
    with pytest.raises(ValueError, match="fewer than the context"):
        fused_conv.conv(x[:, :3], packed)
    with pytest.raises(ValueError, match="is not"):
        fused_conv.conv(x, packed, residual=torch.zeros(1, 3, 16, device=DEVICE))
    with pytest.raises(ValueError, match="not a multiple of 16"):
        fused_conv.conv(torch.zeros(1, 4, 8), fused_conv.pack(torch.zeros(16, 8, 1), None, 1))


def test_tiles_divide_the_input_channels_and_few_rows_stay_with_cudnn() -> None:
    for c_in, c_out, taps in [(96, 96, 7), (192, 192, 1), (384, 384, 1), (768, 768, 7), (1536, 6144, 2)]:
        packed = fused_conv.pack(torch.zeros(c_out, c_in, taps), None, 1)
        at = fused_conv.tiles(packed)
        assert c_in % at.block_k == 0 and at.block_k >= fused_conv.MIN_BLOCK_K
    wide = fused_conv.pack(torch.zeros(768, 768, 7), None, 1)
    # 128 x 256 tiles: 132 processors need 132 of them; 32 rows of 768 channels make 3.
    assert not fused_conv.fills(32, wide, torch.device("cuda"), sms=132)
    assert fused_conv.fills(128 * 44, wide, torch.device("cuda"), sms=132)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the decoder takes the kernel on CUDA only")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoder_with_the_kernel_on_cuda(dtype: torch.dtype) -> None:
    """The real-size decoder with the kernel against it without: in float32 the same samples, also
    when decoded in two steps; in bfloat16 no further from a float32 decode than cuDNN's convs."""
    cfg = codec_decoder.CodecDecoderConfig.from_dict(checkpoints.codec_decoder_config("0.6b"))
    decoder = codec_decoder.CodecDecoder(cfg)
    codec_decoder.random_init_(decoder, torch.Generator().manual_seed(0))
    exact = decoder.to(DEVICE).eval()
    exact.prepare()
    codes = torch.randint(0, cfg.codebook_size, (64, 8, cfg.num_quantizers), device=DEVICE)
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = exact(codes)
        model = exact if dtype == torch.float32 else codec_decoder.CodecDecoder(cfg)
        if model is not exact:
            model.load_state_dict(exact.state_dict())
            model = model.to(DEVICE, dtype).eval()
            model.prepare()
        Kernels(fused_conv=True).bind(model)
        state = model.new_state(64, DEVICE, dtype)
        got = torch.cat([model.decode_step(codes[:, :3], state), model.decode_step(codes[:, 3:], state)], 1)
        assert any(m.packed is not None for m in model.modules() if hasattr(m, "packed"))
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:
            Kernels().bind(model)
            cudnn = model.decode_step(codes, model.new_state(64, DEVICE, dtype))
            assert (got.float() - want).abs().max() <= 1.5 * (cudnn.float() - want).abs().max() + 1e-3
