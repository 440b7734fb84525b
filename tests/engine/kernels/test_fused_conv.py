"""The decoder's conv kernel gives what PyTorch's convs give: dilated causal convs over a carried
context, transposed convs cut as the decoder cuts them, with bias and residual. On a GPU it runs compiled; without one, in Triton's interpreter on CPU tensors (see
conftest). The real-size decoder with the kernels chosen is tested on a GPU only, where it runs; a
tiny one with the unit kernel, in the interpreter."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tests.engine.kernels.decoders import random_decoder
from voicewire.engine.kernels import fused_conv, pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import codec_decoder

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
@pytest.mark.parametrize("fused_unit", [False, True])
def test_decoder_with_the_kernel_on_cuda(dtype: torch.dtype, fused_unit: bool) -> None:
    """The real-size decoder with the kernel against it without: in float32 the same samples, also
    when decoded in two steps; in bfloat16 no further from a float32 decode than cuDNN's convs.
    With `fused_unit`, the 96-channel block's residual units as one kernel each."""
    exact = random_decoder("0.6b", DEVICE)
    cfg = exact.cfg
    codes = torch.randint(0, cfg.codebook_size, (64, 8, cfg.num_quantizers), device=DEVICE)
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = exact(codes)
        # The same random weights (one seed), rounded to bfloat16.
        model = exact if dtype == torch.float32 else random_decoder("0.6b", DEVICE, dtype)
        Kernels(fused_conv=True, fused_unit=fused_unit).bind(model)
        state = model.new_state(64, DEVICE, dtype)
        got = torch.cat([model.decode_step(codes[:, :3], state), model.decode_step(codes[:, 3:], state)], 1)
        assert any(m.packed is not None for m in model.modules() if hasattr(m, "packed"))
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:
            Kernels().bind(model)
            cudnn = model.decode_step(codes, model.new_state(64, DEVICE, dtype))
            assert (got.float() - want).abs().max() <= 1.5 * (cudnn.float() - want).abs().max() + 1e-3


@pytest.mark.parametrize(
    ("rows", "frames", "channels", "dilation"), [(3, 10, 48, 3), (2, 21, 96, 9), (5, 1, 16, 1)]
)
def test_unit_equals_the_unfused_residual_unit(rows: int, frames: int, channels: int, dilation: int) -> None:
    """`unit` against float64 math: the residual plus the 1x1 conv of SnakeBeta(the dilated conv of
    the activated input, with its bias), with its bias; channels not a power of two (a padded
    tile) and a single frame too."""
    context = 6 * dilation
    x = _randn(rows, context + frames + 2, channels, seed=frames)[:, 1 : 1 + context + frames]
    res = _randn(rows, frames, channels, seed=3)
    w1, b1 = _randn(channels, channels, 7, seed=1) / (7 * channels) ** 0.5, _randn(channels, seed=2)
    w2, b2 = _randn(channels, channels, 1, seed=6) / channels**0.5, _randn(channels, seed=7)
    snake = fused_conv.Snake(_randn(channels, seed=4) * 0.5 + 1.0, _randn(channels, seed=5) * 0.3)
    got = fused_conv.unit(
        x, fused_conv.pack(w1, b1, dilation), snake, fused_conv.pack(w2, b2, 1), residual=res
    )
    h = F.conv1d(_exact(x).mT, _exact(w1), _exact(b1), dilation=dilation).mT
    h = pointwise.snake_beta(h, _exact(snake.log_alpha), _exact(snake.log_beta))
    want = _exact(res) + F.conv1d(h.mT, _exact(w2), _exact(b2)).mT
    assert got.shape == (rows, frames, channels) and got.is_contiguous()
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)


def test_unit_refuses_what_it_does_not_take() -> None:
    def _zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=DEVICE)  # the one launch that passes runs where kernels run

    one = fused_conv.pack(_zeros(16, 16, 1), _zeros(16), 1)
    dilated = fused_conv.pack(_zeros(16, 16, 7), _zeros(16), 1)
    snake = fused_conv.Snake(_zeros(16), _zeros(16))
    x, res = _zeros(1, 8, 16), _zeros(1, 2, 16)
    assert fused_conv.unit(x, dilated, snake, one, res).shape == (1, 2, 16)
    with pytest.raises(ValueError, match="the second 1x1"):
        fused_conv.unit(x, dilated, snake, dilated, res)
    with pytest.raises(ValueError, match="both convs need their bias"):
        fused_conv.unit(x, dilated, snake, fused_conv.pack(_zeros(16, 16, 1), None, 1), res)
    with pytest.raises(ValueError, match="is not"):
        fused_conv.unit(x, dilated, snake, one, _zeros(1, 3, 16))
    with pytest.raises(ValueError, match="alpha and beta"):
        fused_conv.unit(x, dilated, fused_conv.Snake(_zeros(8), _zeros(8)), one, res)
    wide = fused_conv.pack(_zeros(256, 256, 1), _zeros(256), 1)
    with pytest.raises(ValueError, match="up to 128"):
        fused_conv.unit(_zeros(1, 2, 256), wide, snake, wide, _zeros(1, 2, 256))


def test_a_tiny_decoder_with_the_unit_kernel_decodes_as_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny decoder whose residual units (64, 32 and 16 channels) run as `unit` (without a GPU in
    Triton's interpreter: the decoder takes the kernels for CUDA tensors only, so there it is told
    these are) decodes in two steps what the eager decoder decodes in one: the carried contexts hold."""
    decoder = random_decoder("tiny", DEVICE, decoder_dim=128, latent_dim=32)
    config = decoder.cfg
    codes = torch.randint(
        0, config.codebook_size, (2, 2, config.num_quantizers), generator=torch.Generator().manual_seed(1)
    ).to(DEVICE)
    # Two rows fill a GPU of one processor: on a real GPU too, the tiny decoder takes the kernels.
    monkeypatch.setattr(fused_conv, "processors", lambda device: 1)
    choose = codec_decoder.fused_conv_weight
    monkeypatch.setattr(
        codec_decoder,
        "fused_conv_weight",
        lambda m, x, rows: choose(m, SimpleNamespace(is_cuda=True, device=x.device), rows),
    )
    widths: list[int] = []
    kernel = fused_conv.unit
    monkeypatch.setattr(fused_conv, "unit", lambda x, *args: widths.append(x.shape[-1]) or kernel(x, *args))
    # float32 without TF32 on both sides: the kernel's dots are IEEE in float32
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = decoder.decode_step(codes, decoder.new_state(2, DEVICE, torch.float32))
        Kernels(fused_conv=True, fused_unit=True).bind(decoder)
        state = decoder.new_state(2, DEVICE, torch.float32)
        got = torch.cat(
            [decoder.decode_step(codes[:, :1], state), decoder.decode_step(codes[:, 1:], state)], 1
        )
    assert widths == [64, 64, 64, 32, 32, 32, 16, 16, 16] * 2
    # on a GPU, cuBLAS's float32 matmuls and the kernel sum in other orders than the interpreter's
    tolerance = 1e-5 if DEVICE == "cpu" else 1e-4
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
