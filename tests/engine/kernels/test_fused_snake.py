"""The SnakeBeta kernel gives what `pointwise.snake_beta` gives: the activation of x plus a pending
bias, written after a conv's carried context, for strided inputs and every tile. On a GPU it runs
compiled (half precision with the fast sine); without one, in Triton's interpreter on CPU tensors
(see conftest)."""

import pytest
import torch

from tests.engine.kernels.decoders import random_decoder
from voicewire.engine.kernels import fused_snake, pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.codec_decoder import SnakeBeta

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _params(channels: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    log_alpha, log_beta, bias = (0.5 * torch.randn(channels, generator=gen) for _ in range(3))
    return log_alpha.to(DEVICE), log_beta.to(DEVICE), bias.to(DEVICE)


def _reference(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    bias: torch.Tensor | None,
    context: torch.Tensor | None,
) -> torch.Tensor:
    """The eager activation in float32, after the context."""
    f = [t.float() if t is not None else None for t in (x, log_alpha, log_beta, bias)]
    y = pointwise.snake_beta(*f)
    return y if context is None else torch.cat([context.float(), y], dim=1)


@pytest.mark.parametrize(
    ("rows", "frames", "channels", "context", "bias"),
    [
        (3, 10, 96, 6, False),  # a dilated conv's input; 96 channels: three blocks of 32
        (2, 7, 192, 0, True),  # after the previous conv, before a 1x1 conv: a pending bias, no context
        (1, 200, 384, 54, False),  # a context longer than some tiles' span, many time blocks
        (2, 5, 768, 1, False),  # a transposed conv's single carried frame
        (4, 1, 24, 2, False),  # fewer channels than a block: eight of them
    ],
)
def test_kernel_equals_the_eager_activation(
    rows: int, frames: int, channels: int, context: int, bias: bool
) -> None:
    gen = torch.Generator().manual_seed(frames)
    # x a time slice of a longer tensor (a transposed conv's trimmed output): strided rows.
    x = torch.randn(rows, frames + 3, channels, generator=gen).to(DEVICE)[:, 2 : 2 + frames]
    carried = torch.randn(rows, context, channels, generator=gen).to(DEVICE) if context else None
    log_alpha, log_beta, pending = _params(channels, frames)
    pending = pending if bias else None
    got = fused_snake.snake_beta(x, log_alpha, log_beta, pending, carried)
    assert got.shape == (rows, context + frames, channels) and got.is_contiguous()
    want = _reference(x, log_alpha, log_beta, pending, carried)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if carried is not None:
        assert torch.equal(got[:, :context], carried)  # the context is copied, not recomputed
        # The next context written in the same pass, into a strided view (a row of StateRows.tails):
        # the output's last `context` times, which reach back into the carried one when T < context.
        rows_of = torch.full((rows, 5 + context * channels), float("nan"), device=DEVICE)
        tail = rows_of[:, 3 : 3 + context * channels].view(rows, context, channels)
        again = fused_snake.snake_beta(x, log_alpha, log_beta, pending, carried, tail=tail)
        assert torch.equal(again, got) and torch.equal(tail, got[:, -context:])
        assert rows_of[:, :3].isnan().all() and rows_of[:, 3 + context * channels :].isnan().all()


def test_kernel_in_bfloat16_is_the_activation_rounded_once() -> None:
    """Half precision: float32 math inside (on a GPU with the fast sine), one rounding at the store."""
    gen = torch.Generator().manual_seed(3)
    x = (4 * torch.randn(2, 300, 96, generator=gen)).to(DEVICE, torch.bfloat16)
    carried = torch.randn(2, 18, 96, generator=gen).to(DEVICE, torch.bfloat16)
    log_alpha, log_beta, _ = (t.bfloat16() for t in _params(96, 3))
    got = fused_snake.snake_beta(x, log_alpha, log_beta, None, carried)
    assert got.dtype == torch.bfloat16
    want = _reference(x, log_alpha, log_beta, None, carried)
    # One bfloat16 rounding (2^-8 relative) plus the fast sine's error, far below it.
    torch.testing.assert_close(got.float(), want, rtol=2**-7, atol=1e-3)


def test_kernel_refuses_mismatched_inputs() -> None:
    x = torch.zeros(2, 4, 96, device=DEVICE)
    log_alpha, log_beta, bias = _params(96, 0)
    with pytest.raises(ValueError, match="contiguous channel"):
        fused_snake.snake_beta(x.mT.contiguous().mT, log_alpha, log_beta)
    carried = torch.zeros(2, 3, 96, device=DEVICE)
    with pytest.raises(ValueError, match="must have the context's shape"):
        fused_snake.snake_beta(
            x, log_alpha, log_beta, None, carried, tail=torch.zeros(2, 2, 96, device=DEVICE)
        )
    with pytest.raises(ValueError, match="must have the context's shape"):
        fused_snake.snake_beta(x, log_alpha, log_beta, tail=carried)
    with pytest.raises(ValueError, match=r"must be \[96\]"):
        fused_snake.snake_beta(x, log_alpha[:48], log_beta)
    with pytest.raises(ValueError, match="does not match"):
        fused_snake.snake_beta(x, log_alpha, log_beta, None, torch.zeros(1, 3, 96, device=DEVICE))
    assert fused_snake.snake_beta(x[:0], log_alpha, log_beta, bias).shape == (0, 4, 96)


def test_channel_blocks_divide_the_decoders_widths() -> None:
    blocks = {c: fused_snake._channel_block(c) for c in (1536, 768, 384, 192, 96, 24)}
    assert blocks == {1536: 128, 768: 128, 384: 128, 192: 64, 96: 32, 24: 8}


def test_snake_beta_module_takes_the_kernel_when_its_kernels_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `Kernels.fused_snake`, a CUDA tensor goes through the kernel (on CPU, the eager
    function stays)."""
    act = SnakeBeta(96).to(DEVICE)
    Kernels(fused_snake=True).bind(act)
    with torch.no_grad():
        act.alpha.copy_(_params(96, 7)[0])
    x, carried = torch.randn(1, 5, 96, device=DEVICE), torch.randn(1, 6, 96, device=DEVICE)
    calls: list[int] = []
    kernel = fused_snake.snake_beta
    monkeypatch.setattr(
        fused_snake, "snake_beta", lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs)
    )
    tail = torch.zeros(1, 6, 96, device=DEVICE)
    with torch.no_grad():
        got = act(x, context=carried, tail=tail)
    assert len(calls) == (1 if DEVICE == "cuda" else 0)
    torch.testing.assert_close(got, _reference(x, act.alpha, act.beta, None, carried), rtol=1e-5, atol=1e-5)
    assert torch.equal(tail, got[:, -6:])  # the conv's next context, by the kernel or after it


def test_decoder_steps_through_the_kernel_carry_their_contexts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny decoder with every activation through the kernel (on CPU, in Triton's interpreter;
    a module takes it on CUDA only), decoding 1, 2, then 5 frames: each step's contexts are the
    tails the kernel wrote in the step before (`StateRows.tail`), so the samples are those of one
    decode without it."""
    model = random_decoder("tiny", DEVICE)
    codes = torch.randint(0, model.cfg.codebook_size, (2, 8, model.cfg.num_quantizers), device=DEVICE)
    calls: list[bool] = []

    def through_the_kernel(self, x, bias=None, context=None, tail=None):
        calls.append(tail is not None)
        return fused_snake.snake_beta(x, self.alpha, self.beta, bias, context, tail=tail)

    # TF32 off: cuDNN's convs would round each call's differently sized input differently.
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = model(codes)
        monkeypatch.setattr(SnakeBeta, "forward", through_the_kernel)
        state = model.new_state(2, DEVICE, torch.float32)
        got = torch.cat([model.decode_step(codes[:, a:b], state) for a, b in ((0, 1), (1, 3), (3, 8))], 1)
    assert any(calls) and not all(calls)  # convs with a context, and activations without one
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the decoder takes the kernel on CUDA only")
def test_decoder_steps_with_the_kernel_carry_their_contexts() -> None:
    """The real-size decoder with the activation kernel, in float32 (the precise sine), decoding
    1, 2, then 5 frames: each step's contexts are the tails the kernel wrote in the step before,
    so the samples are those of one decode without kernels."""
    model = random_decoder("0.6b", DEVICE)
    codes = torch.randint(0, model.cfg.codebook_size, (4, 8, model.cfg.num_quantizers), device=DEVICE)
    with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = model(codes)
        Kernels(fused_snake=True).bind(model)
        state = model.new_state(4, DEVICE, torch.float32)
        got = torch.cat([model.decode_step(codes[:, a:b], state) for a, b in ((0, 1), (1, 3), (3, 8))], 1)
        Kernels().bind(model)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
