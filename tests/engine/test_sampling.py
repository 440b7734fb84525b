import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from voicewire.engine.sampling import RowSampling, SamplingParams, apply_repetition_penalty, mask_ids, sample


def _rows(params: SamplingParams, batch: int = 1) -> RowSampling:
    return RowSampling.uniform(params, batch)


def test_repetition_penalty_divides_positive_and_multiplies_negative() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert out.tolist() == [[1.0, -4.0, 1.0, -1.0]]


def test_mask_ids_sets_minus_inf() -> None:
    out = mask_ids(torch.zeros(2, 3), torch.tensor([False, True, False]))
    assert torch.isinf(out[:, 1]).all() and (out[:, [0, 2]] == 0).all()


def test_greedy_is_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, 2.0], [5.0, -1.0, 4.9]])
    assert sample(logits, _rows(SamplingParams(do_sample=False), 2), [None, None]).tolist() == [1, 0]


def test_top_k_keeps_only_k_best() -> None:
    logits = torch.arange(10.0)[None]
    params = _rows(SamplingParams(temperature=1.0, top_k=3))
    gens = [torch.Generator().manual_seed(0)]
    draws = {int(sample(logits, params, gens)) for _ in range(200)}
    assert draws == {7, 8, 9}


def test_top_p_keeps_smallest_set_over_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    params = _rows(SamplingParams(temperature=1.0, top_k=0, top_p=0.7))
    gens = [torch.Generator().manual_seed(1)]
    draws = {int(sample(probs.log(), params, gens)) for _ in range(300)}
    assert draws == {0, 1}


def test_draws_follow_the_distribution() -> None:
    probs = torch.tensor([0.6, 0.3, 0.1])
    params = _rows(SamplingParams(temperature=1.0, top_k=0))
    gen = torch.Generator().manual_seed(3)
    counts = torch.zeros(3)
    for _ in range(3000):
        counts[sample(probs.log()[None], params, [gen])] += 1
    assert torch.allclose(counts / counts.sum(), probs, atol=0.03)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4))
def test_each_row_is_reproducible_from_its_own_seed(seed: int, rows: int) -> None:
    logits = torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
    params = _rows(SamplingParams(), rows)

    def draw(order: list[int]) -> list[int]:
        gens = [torch.Generator().manual_seed(seed + r) for r in order]
        return sample(logits[order], params, gens).tolist()

    forward = draw(list(range(rows)))
    backward = draw(list(reversed(range(rows))))
    assert forward == list(reversed(backward))


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
    gens = [None, torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    draws = [set(), set(), set()]
    for _ in range(300):
        for b, token in enumerate(sample(logits, rows, gens).tolist()):
            draws[b].add(token)
    assert draws == [{3}, {2, 3}, {0}]


def test_inactive_rows_draw_nothing() -> None:
    rows = RowSampling.uniform(SamplingParams(temperature=1.0, top_k=0), 2)
    logits = torch.zeros(2, 16)
    gen = torch.Generator().manual_seed(9)
    before = gen.get_state()
    active = torch.tensor([True, False])
    sample(logits, rows.rows(0, 2, active), [torch.Generator().manual_seed(1), None])
    assert torch.equal(gen.get_state(), before)
    assert rows.rows(0, 2, active).do_sample.tolist() == [True, False]
