import torch

from voicewire.engine.kernels import pointwise
from voicewire.engine.model.layers import DecoderConfig, DecoderStack, scaled_init_

CFG = DecoderConfig(
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
)


def _stack() -> DecoderStack:
    stack = DecoderStack(CFG)
    scaled_init_(stack, torch.Generator().manual_seed(0))
    for name, p in stack.named_parameters():
        if name.endswith("norm.weight"):  # norms away from one, so that q's and k's weights differ
            p.data.uniform_(0.5, 1.5)
    return stack.eval()


def test_float32_qk_norm_and_rope_together_equal_them_apart() -> None:
    # In eager float32 q's and k's heads are normed and rotated as one tensor: the very same
    # arithmetic per element as one at a time (the form compiled and half-precision calls keep).
    torch.manual_seed(0)
    b, t, d = 3, 2, CFG.head_dim
    qkv = torch.randn(b, t, (4 + 2 + 2) * d) * 3
    q, k, v = qkv.split([4 * d, 2 * d, 2 * d], dim=-1)
    q, k, v = q.view(b, t, 4, d), k.view(b, t, 2, d), v.view(b, t, 2, d)
    q_weight, k_weight = torch.rand(d) + 0.5, torch.rand(d) + 0.5
    positions = torch.tensor([[3, 4], [0, 1], [7, 8]])
    cos, sin = (torch.randn(b, t, d) for _ in range(2))
    caches = [torch.zeros(b, 2, 16, d) for _ in range(2)]
    got = pointwise.qk_norm_rope_store(q, k, v, q_weight, k_weight, 1e-6, cos, sin, positions, *caches)

    def apart(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        normed = weight * torch.nn.functional.rms_norm(x, (d,), eps=1e-6)
        return pointwise.rotate(normed.transpose(1, 2), cos[:, None], sin[:, None])

    assert torch.equal(got, apart(q, q_weight))
    rows = torch.arange(b)[:, None]
    assert torch.equal(caches[0][rows, :, positions], apart(k, k_weight).transpose(1, 2))
    assert torch.equal(caches[1][rows, :, positions], v)


def test_attention_inputs_made_beforehand_give_the_same_hidden_states() -> None:
    stack = _stack()
    x = torch.randn(2, 1, CFG.hidden_size)
    positions = torch.tensor([[5], [2]])
    with torch.inference_mode():
        caches = [stack.new_cache(2, 16) for _ in range(2)]
        inputs = stack.attention_inputs(positions, caches[1], x.dtype)
        assert torch.equal(stack(x, positions, caches[0]), stack(x, positions, caches[1], inputs))
        assert torch.equal(caches[0].k, caches[1].k) and torch.equal(caches[0].v, caches[1].v)
