"""The fused draw gives `sampling.sample`'s ids for every kind of row (greedy, top-k, top-p, both,
neither), with the chosen rows' embeddings, written where asked. On a GPU it runs compiled; without
one, in Triton's interpreter on CPU tensors (see conftest)."""

import pytest
import torch

from voicewire.engine.config import SamplingParams
from voicewire.engine.kernels import fused_draw
from voicewire.engine.model.sampling import TOP_K_CAP, Draw, RowSampling, sample

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# One row of each kind; the last two need the full draw (top-k off, or above the cap).
KINDS = [
    SamplingParams(do_sample=False),
    SamplingParams(temperature=0.9, top_k=50),
    SamplingParams(temperature=0.7, top_k=1),
    SamplingParams(temperature=1.3, top_k=TOP_K_CAP, top_p=0.8),
    SamplingParams(temperature=1.0, top_k=5, top_p=0.5),
    SamplingParams(temperature=0.9, top_k=0, top_p=0.9),
    SamplingParams(temperature=1.1, top_k=5000, top_p=1.0),
]


def _batch(kinds: list[SamplingParams], repeat: int) -> RowSampling:
    rows = RowSampling.allocate(len(kinds) * repeat, "cpu")
    for i in range(len(kinds) * repeat):
        rows.set(i, kinds[i % len(kinds)])
    return RowSampling(*(t.to(DEVICE) for t in (rows.do_sample, rows.temperature, rows.top_k, rows.top_p)))


def _inputs(batch: int, vocab: int, seed: int, scale: float = 3.0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, vocab, generator=gen)
    seeds = torch.randint(0, 2**62, (batch,), generator=gen)
    counters = torch.randint(0, 2**20, (batch,), generator=gen)
    return tuple(t.to(DEVICE) for t in (logits, seeds, counters))


@pytest.mark.parametrize("vocab", [2048, 3072, 96])
def test_every_kind_of_row_draws_what_sample_draws(vocab: int) -> None:
    params = _batch(KINDS, 3)
    batch = params.do_sample.shape[0]
    for trial in range(4):
        logits, seeds, counters = _inputs(batch, vocab, seed=vocab + trial)
        ids, rows = fused_draw.draw(logits, params, seeds, counters, counter_offset=trial + 1)
        want = sample(logits, params, seeds, counters + trial + 1, Draw.FULL)
        assert rows is None
        assert ids.tolist() == want.tolist()
    # The draws do sample: over the trials the sampling rows did not all take the argmax.
    assert (ids != logits.argmax(dim=-1))[params.do_sample].any()


def test_top_k_rows_match_the_capped_draw_too() -> None:
    kinds = KINDS[:5]  # every sampling row keeps at most TOP_K_CAP ids
    params = _batch(kinds, 8)
    logits, seeds, counters = _inputs(params.do_sample.shape[0], 2048, seed=7)
    ids, _ = fused_draw.draw(logits, params, seeds, counters)
    assert ids.tolist() == sample(logits, params, seeds, counters, Draw.TOP_K).tolist()


def test_bfloat16_logits_and_ties_at_the_top() -> None:
    # Without the top_p=0.5 row: there the tie would sit on the threshold, where the order among
    # equal logits (the sort's) decides.
    params = _batch(KINDS[:4] + KINDS[5:], 2)
    batch = params.do_sample.shape[0]
    logits, seeds, counters = _inputs(batch, 2048, seed=11)
    logits = logits.bfloat16()
    logits[:, 100] = logits[:, 7] = 50.0  # two equal best ids: greedy takes the first
    ids, _ = fused_draw.draw(logits, params, seeds, counters)
    want = sample(logits, params, seeds, counters, Draw.FULL)
    assert ids.tolist() == want.tolist()
    greedy = ~params.do_sample
    assert (ids[greedy] == 7).all()


def test_many_draws_follow_the_kept_distribution() -> None:
    # One top-k row drawn 400 times with fresh counters: only the 3 best ids, in about their odds.
    logits = torch.tensor([[2.0, 1.0, 0.0, 1.5, -1.0, 0.5]], device=DEVICE).expand(400, 6).contiguous()
    params = _batch([SamplingParams(temperature=1.0, top_k=3)], 400)
    seeds = torch.full((400,), 1234, device=DEVICE)
    ids, _ = fused_draw.draw(logits, params, seeds, torch.arange(400, device=DEVICE))
    counts = torch.bincount(ids.cpu(), minlength=6).tolist()
    assert counts[2] == counts[4] == counts[5] == 0
    odds = torch.tensor([2.0, 1.5, 1.0]).softmax(0) * 400  # ids 0, 3, 1
    for got, want in zip((counts[0], counts[3], counts[1]), odds.tolist(), strict=True):
        assert abs(got - want) < 4 * want**0.5


def test_writes_into_a_column_and_gathers_embedding_rows() -> None:
    params = _batch(KINDS, 1)
    batch = params.do_sample.shape[0]
    logits, seeds, counters = _inputs(batch, 96, seed=3)
    table = torch.randn(96 + 4, 24, device=DEVICE).bfloat16()
    codes = torch.full((batch, 3), -1, dtype=torch.long, device=DEVICE)
    ids, rows = fused_draw.draw(logits, params, seeds, counters, out=codes[:, 1], table=table)
    want = sample(logits, params, seeds, counters, Draw.FULL)
    assert codes[:, 1].tolist() == want.tolist() and ids.data_ptr() == codes[:, 1].data_ptr()
    assert (codes[:, [0, 2]] == -1).all()
    assert rows is not None and rows.dtype == torch.bfloat16
    assert torch.equal(rows, table[want])


def test_refuses_what_it_cannot_do() -> None:
    params = _batch(KINDS[:1], 2)
    logits, seeds, counters = _inputs(2, 16, seed=0)
    with pytest.raises(ValueError, match="last dim must be contiguous"):
        fused_draw.draw(logits.T.contiguous().T, params, seeds, counters)
    with pytest.raises(ValueError, match="out must be int64"):
        fused_draw.draw(logits, params, seeds, counters, out=torch.zeros(2, dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="at least 16 rows"):
        fused_draw.draw(logits, params, seeds, counters, table=torch.zeros(8, 4, device=DEVICE))


def test_masks_apply_the_talkers_penalty_bans_and_eos_rule() -> None:
    from voicewire.engine.runtime.frame_step import choose_code0

    vocab, eos = 3072, 2150
    params = _batch(KINDS, 2)
    batch = params.do_sample.shape[0]
    logits, seeds, counters = _inputs(batch, vocab, seed=5)
    gen = torch.Generator().manual_seed(6)
    seen = (torch.rand(batch, vocab, generator=gen) < 0.3).to(DEVICE)
    penalty = (1 + torch.rand(batch, generator=gen)).to(DEVICE)
    banned = torch.zeros(vocab, dtype=torch.bool, device=DEVICE)
    banned[2048:] = True
    banned[eos] = False
    no_eos = (torch.arange(batch) % 2 == 0).to(DEVICE)
    logits[:, eos] = 30.0  # the best id wherever EOS is allowed
    logits[:, 2500] = 40.0  # banned: never drawn
    masks = fused_draw.Masks(seen, penalty, banned, no_eos, eos)
    ids, _ = fused_draw.draw(logits, params, seeds, counters, masks=masks)
    eos_only = torch.zeros(vocab, dtype=torch.bool, device=DEVICE)
    eos_only[eos] = True
    want = choose_code0(
        logits, seen, penalty, banned, eos_only & no_eos[:, None], params, seeds, counters, Draw.FULL
    )
    assert ids.tolist() == want.tolist()
    assert (ids < 2048)[no_eos].all() and (ids != 2500).all()
    assert (ids[~no_eos & ~params.do_sample] == eos).all()
    with pytest.raises(ValueError, match="masks must be contiguous"):
        fused_draw.draw(
            logits, params, seeds, counters, masks=fused_draw.Masks(seen.T, penalty, banned, no_eos, eos)
        )
