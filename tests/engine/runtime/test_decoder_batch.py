"""Batched incremental decoding: any grouping, padding and frame split gives each stream's whole decode."""

import itertools
from collections import Counter

import pytest
import torch

from tests.engine.torch_calls import TorchCalls
from voicewire.engine.model.codec_decoder import CodecDecoder, load_codec_decoder
from voicewire.engine.runtime.decoder_batch import BATCH_BUCKETS, BatchedDecoder, plan_rows, split_frames

FRAMES = 27
SAMPLES = 1920


@pytest.fixture(scope="module")
def decoder(tiny_checkpoints) -> CodecDecoder:
    return load_codec_decoder(tiny_checkpoints["custom_voice"] / "speech_tokenizer", "cpu", torch.float32)


@pytest.fixture(scope="module")
def codes() -> torch.Tensor:
    return torch.randint(0, 2048, (3, FRAMES, 16), generator=torch.Generator().manual_seed(8))


def test_split_frames_uses_graphed_sizes() -> None:
    assert split_frames(13) == [8, 4, 1]
    assert split_frames(32) == [8, 8, 8, 8]
    assert split_frames(7) == [4, 2, 1]
    assert all(sum(split_frames(n)) == n for n in range(1, 70))


def _decode_in_groups(batch: BatchedDecoder, codes: torch.Tensor) -> torch.Tensor:
    """Streams 0 and 2 in rows 4 and 1, decoded together and alone in uneven chunks, after earlier
    streams in those rows (reset must leave nothing of them)."""
    rows = {0: 4, 2: 1}
    out = {s: [] for s in rows}
    batch.decode(list(rows.values()), codes[[1, 1], :5])
    batch.reset(list(rows.values()))
    cuts = [0, 3, 16, 17, FRAMES]
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        streams = [0, 2] if i % 2 == 0 else [2]
        if i % 2 == 1:  # stream 0 catches up alone afterwards
            out[0].append(batch.decode([rows[0]], codes[[0], lo:hi]))
        audio = batch.decode([rows[s] for s in streams], codes[streams, lo:hi])
        for s, a in zip(streams, audio, strict=True):
            out[s].append(a[None])
    return torch.stack([torch.cat(out[s], dim=1)[0] for s in rows])


@pytest.mark.parametrize("pad", [False, True])
def test_groups_equal_whole_decodes(decoder: CodecDecoder, codes: torch.Tensor, pad: bool) -> None:
    with torch.inference_mode():
        whole = decoder(codes[[0, 2]]).float()
        batch = BatchedDecoder(decoder, slots=5, pad=pad)
        assert batch.buckets == ([1, 2, 4, 5] if pad else None)
        got = _decode_in_groups(batch, codes)
    assert got.shape == (2, FRAMES * SAMPLES)
    assert torch.allclose(got, whole, atol=1e-5), float((got - whole).abs().max())
    # Rows no stream used, and the scratch row padding writes to, are the only others touched.
    assert int(batch.state.pos[0]) == 0 and int(batch.state.pos[4]) == FRAMES


def test_row_plans_take_the_cheapest_padding() -> None:
    # Replays costing 2 ms plus 0.2 ms a row (about the 8-frame graphs on an H100).
    plans = plan_rows(512, list(BATCH_BUCKETS), lambda b: 2.0 + 0.2 * b)
    assert plans[65] == [64, 1]  # 2 replays of 65 rows, not one of 96
    assert plans[90] == [90]  # 96 rows in one replay beat 64 + 32 in two
    assert plans[64] == [64] and plans[1] == [1] and plans[0] == []
    assert sum(plans[300]) == 300 and len(plans[300]) == 2
    assert all(sum(plan) == m and max(plan) <= 512 for m, plan in enumerate(plans) if m)


def test_planned_row_groups_equal_whole_decodes(decoder: CodecDecoder, codes: torch.Tensor) -> None:
    """Rows cut into groups by a plan (here: every replay above one row costs ten times more)
    decode what one group decodes."""
    with torch.inference_mode():
        whole = decoder(codes[[0, 2]]).float()
        batch = BatchedDecoder(decoder, slots=5, pad=True)
        assert batch.buckets is not None
        batch.plans = {
            n: plan_rows(5, batch.buckets, lambda b: 1.0 if b == 1 else 10.0) for n in (1, 2, 4, 8)
        }
        assert batch.plans[8][2] == [1, 1]
        got = _decode_in_groups(batch, codes)
    assert torch.allclose(got, whole, atol=1e-5), float((got - whole).abs().max())


def test_one_call_decodes_many_passes(decoder: CodecDecoder, codes: torch.Tensor) -> None:
    """27 frames of two rows in one call (passes of 8, 8, 8, 2 and 1 frames) stage more inputs than
    the staging buffer first holds, and equal one whole decode."""
    with torch.inference_mode():
        whole = decoder(codes[[0, 2]]).float()
        batch = BatchedDecoder(decoder, slots=2, pad=True)
        first = batch._staging.shape[0]
        got = batch.decode([1, 0], codes[[0, 2]])
    assert batch._staging.shape[0] > first
    assert got.shape == (2, FRAMES * SAMPLES) and got.dtype == torch.float32
    assert torch.allclose(got, whole, atol=1e-5), float((got - whole).abs().max())


def test_a_padded_group_costs_the_host_three_torch_calls(decoder: CodecDecoder, codes: torch.Tensor) -> None:
    """Besides the decoder itself (the replay, graphed), a pass of one group makes three torch calls:
    its output's allocation, one copy of its rows and codes in, one copy of its samples out. Each
    lets go of the GIL, and waits to take it back while the engine's other threads run Python."""
    with torch.inference_mode():
        batch = BatchedDecoder(decoder, slots=5, pad=True)
        batch.decode([0, 1, 2], codes[:, :8])  # a first call may grow buffers
        counted = TorchCalls()
        batch._decode_eager = counted.uncounted(batch._decode_eager)
        with counted:
            audio = batch.decode([0, 1, 2], codes[:, 8:16])
    assert audio.shape == (3, 8 * SAMPLES)
    assert counted.calls == Counter({"empty": 1, "copy_": 2})


def test_graphs_need_cuda(decoder: CodecDecoder) -> None:
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        BatchedDecoder(decoder, slots=2, graphs=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_graphed_decoding_equals_eager_on_cuda(tiny_checkpoints, codes: torch.Tensor) -> None:
    folder = tiny_checkpoints["custom_voice"] / "speech_tokenizer"
    decoder = load_codec_decoder(folder, "cuda", torch.bfloat16)
    with torch.inference_mode():
        eager = _decode_in_groups(BatchedDecoder(decoder, slots=5, pad=True), codes)
        graphed = BatchedDecoder(decoder, slots=5, graphs=True)
        graphed.capture()
        assert torch.equal(_decode_in_groups(graphed, codes), eager)
