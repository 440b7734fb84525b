import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from voicewire.engine.config import SamplingParams
from voicewire.engine.model.sampling import (
    TOP_K_CAP,
    Draw,
    RowSampling,
    apply_repetition_penalty,
    mask_ids,
    noise_key,
    sample,
    sample_keyed,
    uniform_noise,
    unit_interval,
)


def _rows(params: SamplingParams, batch: int = 1) -> RowSampling:
    return RowSampling.uniform(params, batch)


def _keys(*seeds: int) -> torch.Tensor:
    return torch.tensor(seeds, dtype=torch.long)


def _draws(
    logits: torch.Tensor, params: RowSampling, seeds: torch.Tensor, n: int, draw: Draw = Draw.FULL
) -> torch.Tensor:
    """n draws per row with counters 0..n-1 -> [n, B]."""
    return torch.stack([sample(logits, params, seeds, torch.full_like(seeds, c), draw) for c in range(n)])


def test_repetition_penalty_divides_positive_and_multiplies_negative() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert out.tolist() == [[1.0, -4.0, 1.0, -1.0]]


def test_mask_ids_sets_minus_inf() -> None:
    out = mask_ids(torch.zeros(2, 3), torch.tensor([False, True, False]))
    assert torch.isinf(out[:, 1]).all() and (out[:, [0, 2]] == 0).all()


def test_greedy_is_argmax_with_or_without_the_draw() -> None:
    logits = torch.tensor([[0.1, 3.0, 2.0], [5.0, -1.0, 4.9]])
    params = _rows(SamplingParams(do_sample=False), 2)
    keys = _keys(1, 2)
    for draw in Draw:
        assert sample(logits, params, keys, keys, draw).tolist() == [1, 0]


def test_noise_is_uniform_and_keyed() -> None:
    u = uniform_noise(_keys(5, 5, 6), _keys(0, 1, 0), 50_000)
    assert u.shape == (3, 50_000) and u.dtype == torch.float32
    assert float(u.min()) > 0 and float(u.max()) < 1
    for row in u:
        assert abs(float(row.mean()) - 0.5) < 0.01 and abs(float(row.var()) - 1 / 12) < 0.005
    # Any change of seed or counter gives unrelated noise; the same key gives the same noise.
    assert abs(float(torch.corrcoef(u)[0, 1])) < 0.02 and abs(float(torch.corrcoef(u)[0, 2])) < 0.02
    assert torch.equal(uniform_noise(_keys(5), _keys(1), 50_000)[0], u[1])
    # Negative and 63-bit seeds are fine.
    assert uniform_noise(_keys(-3, 2**63 - 1), _keys(0, 2**40), 8).isfinite().all()


def test_keys_made_at_once_draw_as_each_draw_alone() -> None:
    # The code predictor makes its 15 draws' keys in one pass [B, 15]: column k equals the key of
    # (seed, counter k) alone, and keyed draws equal `sample`'s, bit for bit.
    torch.manual_seed(3)
    logits = torch.randn(3, 2048)
    seeds, counters = _keys(7, -3, 2**62), torch.tensor([0, 16, 2**40 + 32])
    keys = noise_key(seeds[:, None], counters[:, None] + torch.arange(1, 16))
    mixed = RowSampling(
        torch.tensor([True, False, True]),
        torch.tensor([0.9, 1.0, 0.5]),
        torch.tensor([50, 0, 3]),
        torch.tensor([1.0, 1.0, 0.8]),
    )
    for k in range(15):
        assert torch.equal(keys[:, k], noise_key(seeds, counters + k + 1))
        for draw in Draw:
            expected = sample(logits, mixed, seeds, counters + k + 1, draw)
            assert torch.equal(sample_keyed(logits, mixed, keys[:, k], draw), expected)


def test_noise_never_reaches_zero_or_one() -> None:
    # The extremes of the hash's bits map strictly inside (0, 1) in float32: a draw never divides by 0.
    ends = unit_interval(torch.tensor([0, 1, 2**23 - 2, 2**23 - 1]))
    assert float(ends.min()) > 0 and float(ends.max()) < 1
    assert len(set(ends.tolist())) == 4


@pytest.mark.parametrize("draw", [Draw.TOP_K, Draw.FULL])
def test_top_k_keeps_only_k_best(draw: Draw) -> None:
    logits = torch.arange(100.0)[None] / 10
    params = _rows(SamplingParams(temperature=1.0, top_k=3))
    assert set(_draws(logits, params, _keys(0), 200, draw).flatten().tolist()) == {97, 98, 99}


def test_draw_needed_by_settings() -> None:
    greedy, capped = SamplingParams(do_sample=False, top_k=0), SamplingParams(top_k=TOP_K_CAP)
    assert Draw.needed([greedy, greedy]) == Draw.GREEDY
    assert Draw.needed([greedy, capped, SamplingParams(top_k=1)]) == Draw.TOP_K
    assert Draw.needed([capped, SamplingParams(top_k=0)]) == Draw.FULL
    assert Draw.needed([SamplingParams(top_k=TOP_K_CAP + 1)]) == Draw.FULL


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    top_k=st.integers(1, TOP_K_CAP),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.3, 2.0),
)
def test_top_k_draw_equals_the_full_draw(seed: int, top_k: int, top_p: float, temperature: float) -> None:
    # Looking at the best TOP_K_CAP ids only gives the very same draws, id for id.
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 2048, generator=gen) * 3
    params = _rows(SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p), 3)
    seeds = torch.tensor([seed, seed + 1, seed + 2])
    assert torch.equal(_draws(logits, params, seeds, 6, Draw.TOP_K), _draws(logits, params, seeds, 6))


def test_top_p_keeps_smallest_set_over_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    params = _rows(SamplingParams(temperature=1.0, top_k=0, top_p=0.7))
    assert set(_draws(probs.log(), params, _keys(1), 300).flatten().tolist()) == {0, 1}


def test_draws_follow_the_distribution() -> None:
    probs = torch.tensor([0.6, 0.3, 0.1])
    params = _rows(SamplingParams(temperature=1.0, top_k=0))
    draws = _draws(probs.log()[None], params, _keys(3), 4000).flatten()
    counts = torch.bincount(draws, minlength=3).float()
    assert torch.allclose(counts / counts.sum(), probs, atol=0.03)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4))
def test_each_row_is_reproducible_from_its_own_seed(seed: int, rows: int) -> None:
    logits = torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
    params = _rows(SamplingParams(), rows)

    def draw(order: list[int]) -> list[int]:
        seeds = torch.tensor([seed + r for r in order])
        return sample(logits[order], params, seeds, seeds * 7).tolist()

    forward = draw(list(range(rows)))
    backward = draw(list(reversed(range(rows))))
    assert forward == list(reversed(backward))
    alone = [
        sample(logits[r : r + 1], _rows(SamplingParams()), _keys(seed + r), _keys((seed + r) * 7))
        for r in range(rows)
    ]
    assert forward == [int(a) for a in alone]


def test_invalid_params_are_rejected() -> None:
    for kwargs in ({"temperature": 0.0}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}):
        try:
            SamplingParams(**kwargs)
        except ValueError as exc:
            assert str(next(iter(kwargs))) in str(exc)
        else:
            raise AssertionError(f"{kwargs} accepted")


def test_per_row_penalty_and_parameters() -> None:
    logits = torch.tensor([[2.0, -2.0], [2.0, -2.0]])
    seen = torch.tensor([[True, True], [True, True]])
    out = apply_repetition_penalty(logits, seen, torch.tensor([2.0, 1.0]))
    assert out.tolist() == [[1.0, -4.0], [2.0, -2.0]]
    # Row 0 greedy, row 1 samples from its top 2, row 2 samples with top-p: each by its own settings.
    rows = RowSampling.allocate(3, "cpu")
    rows.set(0, SamplingParams(do_sample=False))
    rows.set(1, SamplingParams(temperature=1.0, top_k=2))
    rows.set(2, SamplingParams(temperature=1.0, top_k=0, top_p=0.5))
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]]).log_softmax(-1).expand(3, 4).contiguous()
    logits[2] = torch.tensor([0.6, 0.2, 0.1, 0.1]).log()
    draws = _draws(logits, rows, _keys(0, 1, 2), 300)
    assert [set(draws[:, b].tolist()) for b in range(3)] == [{3}, {2, 3}, {0}]


def test_inactive_rows_take_the_argmax() -> None:
    rows = RowSampling.uniform(SamplingParams(temperature=1.0, top_k=0), 2)
    active = torch.tensor([True, False])
    assert rows.select(torch.arange(2), active).do_sample.tolist() == [True, False]
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 9.0, 0.0]])
    draws = _draws(logits, rows.select(torch.arange(2), active), _keys(4, 4), 100)
    assert len(set(draws[:, 0].tolist())) > 1 and set(draws[:, 1].tolist()) == {2}


def test_select_takes_listed_rows_or_the_first_ones_as_views() -> None:
    rows = RowSampling.allocate(4, "cpu")
    for b, k in enumerate((5, 6, 7, 8)):
        rows.set(b, SamplingParams(temperature=0.5 + b, top_k=k, top_p=0.9))
    listed, first = rows.select(torch.tensor([0, 1, 2])), rows.select(3)
    for field in ("do_sample", "temperature", "top_k", "top_p"):
        assert torch.equal(getattr(first, field), getattr(listed, field))
        # The first rows are the state's own memory: a step reads them without a gather kernel.
        assert getattr(first, field).data_ptr() == getattr(rows, field).data_ptr()
    assert rows.select(2, torch.tensor([False, True])).do_sample.tolist() == [False, True]
    assert rows.select(torch.tensor([3, 1])).top_k.tolist() == [8, 6]
