"""The batched frame step: bucket padding, counter-keyed draws, and (on CUDA) graphs vs eager."""

from collections import Counter

import pytest
import torch

from tests.engine.torch_calls import TorchCalls
from voicewire.engine.config import EngineConfig, GenerationOptions, SamplingParams
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.sampling import Draw
from voicewire.engine.runtime.frame_step import FrameStepper

SLOTS = 5  # buckets 1, 2, 4, 5: three streams step padded to four


def _options(model: Qwen3TTS, greedy: bool) -> GenerationOptions:
    return GenerationOptions.from_generation_config(model.generation_config, greedy=greedy, suppress_eos=True)


def _run(
    model: Qwen3TTS, stepper: FrameStepper, greedy: list[bool], steps: int = 6, together: bool = False
) -> list[torch.Tensor]:
    """Prefill a slot per entry of `greedy` (one call each, or one for all), then step with a
    changing set of active rows."""
    talker = model.talker
    device = stepper.device
    gen = torch.Generator().manual_seed(11)
    with torch.inference_mode():
        prompts = []
        for slot, g in enumerate(greedy):
            stepper.configure(slot, _options(model, g), seed=100 + slot)
            prompt = torch.randn(6 + slot, talker.cfg.decoder.hidden_size, generator=gen).to(
                device, talker.codec_head.weight.dtype
            )
            prompts.append((slot, prompt, 0))
            if not together:
                stepper.prefill(prompts[-1:])
        if together:
            stepper.prefill(prompts)
        outs = []
        n = len(greedy)
        for step in range(steps):
            active = [(step + slot) % 3 != 0 for slot in range(n)]
            ids = [(7 * step + slot) % talker.cfg.text_vocab_size for slot in range(n)]
            out = stepper.step(n, active, ids).cpu()
            outs.append(out[[slot for slot in range(n) if active[slot]]])
    return outs


@pytest.fixture(scope="module")
def model(tiny_models) -> Qwen3TTS:
    return tiny_models["custom_voice"]


@pytest.mark.parametrize("together", [False, True])
@pytest.mark.parametrize("greedy", [[True, True, True], [False, True, False]])
def test_padding_to_a_bucket_changes_nothing(model: Qwen3TTS, greedy: list[bool], together: bool) -> None:
    # Together, the three prompts prefill as a batch of four, the fourth repeating the first.
    plain = _run(model, FrameStepper(model.talker, SLOTS, 64), greedy, together=together)
    padded_stepper = FrameStepper(model.talker, SLOTS, 64, pad=True)
    assert padded_stepper.buckets == [1, 2, 4, 5]
    assert padded_stepper.prefill_buckets == {
        8: ([1, 2, 4, 8, 16, 32], [8]),
        64: ([1, 2, 4, 8, 16, 32], [16, 32, 64]),
    }
    padded = _run(model, padded_stepper, greedy, together=together)
    for a, b in zip(plain, padded, strict=True):
        assert torch.equal(a, b)
    assert plain[0].shape[1] == 18 and (plain[-1][:, -1] == 1).all()  # 16 codes, next code 0, finite


def test_one_batched_prefill_equals_one_per_stream(model: Qwen3TTS) -> None:
    """Prompts of different lengths (6, 7, 8 rows) padded into one call start the same sequences."""
    greedy = [False, True, False]
    alone = _run(model, FrameStepper(model.talker, SLOTS, 64), greedy)
    together = _run(model, FrameStepper(model.talker, SLOTS, 64), greedy, together=True)
    for a, b in zip(alone, together, strict=True):
        assert torch.equal(a, b)


def test_sampled_rows_depend_on_their_seed_only(model: Qwen3TTS) -> None:
    """A sampling stream draws the same codes whatever shares its batch."""
    both = _run(model, FrameStepper(model.talker, SLOTS, 64), [False, False, True])
    alone = _run(model, FrameStepper(model.talker, SLOTS, 64), [False])
    # Slot 0 is active at steps 1, 2, 4, 5 in both runs (active = (step + slot) % 3 != 0).
    compared = 0
    for a, b in zip(alone, both, strict=True):
        if len(a):
            assert torch.equal(a[0], b[0])
            compared += 1
    assert compared == 4
    assert len({tuple(out[0, :16].tolist()) for out in alone if len(out)}) == 4


def test_a_prefill_span_is_past_the_prompts_last_position(model: Qwen3TTS) -> None:
    stepper = FrameStepper(model.talker, SLOTS, 1024, pad=True, max_prefills=64)
    assert stepper.prefill_spans == [128, 1024]
    assert stepper.prefill_batches == {128: 64, 1024: 8}  # PREFILL_KV_ROWS // span
    assert stepper.prefill_span(10, 117) == 128
    assert stepper.prefill_span(10, 118) == 1024  # its padding would write at position 127, its own
    assert stepper.prefill_span(0, 1024) == 1024
    assert FrameStepper(model.talker, SLOTS, 1024).prefill_spans == [1024]  # unpadded: the whole KV


def _prefill_and_step(model: Qwen3TTS, stepper: FrameStepper, lengths: list[int]) -> list[torch.Tensor]:
    """Prefill one slot per prompt length in one call (sampling, seeded), then step all of them."""
    talker = model.talker
    gen = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        prompts = []
        for slot, length in enumerate(lengths):
            stepper.configure(slot, _options(model, greedy=False), seed=200 + slot)
            rows = torch.randn(length, talker.cfg.decoder.hidden_size, generator=gen)
            prompts.append((slot, rows.to(stepper.device, talker.codec_head.weight.dtype), 0))
        stepper.prefill(prompts)
        n = len(lengths)
        return [
            stepper.step(n, [True] * n, [(3 * step + slot) % 50 for slot in range(n)]).cpu()
            for step in range(5)
        ]


def test_prefills_of_short_and_long_prompts_run_at_their_spans(model: Qwen3TTS) -> None:
    """Prompts of 6 and 7 rows prefill over the first 32 of 256 positions, one of 40 rows over all of
    them, in two calls; the sequences are those of prefills over the whole KV."""
    lengths = [6, 40, 7]
    whole = _prefill_and_step(model, FrameStepper(model.talker, SLOTS, 256), lengths)
    stepper = FrameStepper(model.talker, SLOTS, 256, pad=True)
    assert [stepper.prefill_span(0, n) for n in lengths] == [32, 256, 32]
    calls = []
    stepper._prefill_compute = lambda b, t, span, run=stepper._prefill_compute: (  # type: ignore[method-assign]
        calls.append((b, t, span)),
        run(b, t, span),
    )
    spanned = _prefill_and_step(model, stepper, lengths)
    assert calls == [(2, 16, 32), (1, 64, 256)]  # (batch, length, span) buckets
    for a, b in zip(whole, spanned, strict=True):
        assert torch.equal(a, b)


def test_prefills_beyond_the_batch_run_in_groups(model: Qwen3TTS) -> None:
    greedy = [False, True, False]
    whole = _run(model, FrameStepper(model.talker, SLOTS, 64), greedy, together=True)
    grouped_stepper = FrameStepper(model.talker, SLOTS, 64, pad=True, max_prefills=2)
    assert grouped_stepper.prefill_batch == 2
    grouped = _run(model, grouped_stepper, greedy, together=True)
    for a, b in zip(whole, grouped, strict=True):
        assert torch.equal(a, b)


def test_a_prefill_past_the_first_keeps_the_cached_prefix(model: Qwen3TTS) -> None:
    """A second sequence from position 4 on equals one prefill of the same 4 + 3 rows."""
    talker = model.talker
    rows = torch.randn(7, talker.cfg.decoder.hidden_size, generator=torch.Generator().manual_seed(3))
    outs = []
    for split in (False, True):
        stepper = FrameStepper(talker, 2, 64, pad=True)
        with torch.inference_mode():
            stepper.configure(1, _options(model, True), seed=1)
            if split:
                stepper.prefill([(1, rows[:4], 0)])
                stepper.prefill([(1, rows[4:], 4)])
            else:
                stepper.prefill([(1, rows, 0)])
            outs.append(torch.stack([stepper.step(2, [False, True], [5, 5])[1].clone() for _ in range(4)]))
    assert int(stepper.pos[1]) == 7 + 4
    assert torch.equal(outs[0], outs[1])


def test_attention_spans_change_nothing(model: Qwen3TTS) -> None:
    """Steps that attend to an eighth, a quarter or half of the KV equal steps over all of it; the
    span follows the longest occupied row, and a released row's stale position no longer counts."""
    hidden = model.talker.cfg.decoder.hidden_size
    prompts = [torch.randn(t, hidden, generator=torch.Generator().manual_seed(t)) for t in (20, 5, 6)]

    def run(spans: list[int] | None) -> tuple[list[torch.Tensor], list[int]]:
        stepper = FrameStepper(model.talker, 3, 64, pad=True)
        assert stepper.spans == [8, 16, 32, 64]
        stepper.spans = spans or stepper.spans
        outs, used = [], []

        def step(active: list[bool]) -> torch.Tensor:
            used.append(stepper.attention_span(3, Draw.TOP_K))
            return stepper.step(3, active, [5, 6, 7]).clone()

        with torch.inference_mode():
            for slot in range(3):
                stepper.configure(slot, _options(model, slot != 1), seed=slot)
            stepper.prefill([(0, prompts[0], 0), (1, prompts[1], 0)])
            for i in range(6):  # slot 0 reaches position 26
                outs.append(step([True, i % 2 == 0, False])[:2])
            stepper.release(0)  # its stale position stops counting
            stepper.prefill([(2, prompts[2], 0)])
            for _ in range(3):
                outs.append(step([False, True, True])[1:])
            stepper.prefill([(0, prompts[1], 0)])  # slot 0 anew, after its clamped throwaway writes
            for _ in range(3):
                outs.append(step([True, True, True]))
            assert torch.equal(stepper.pos, torch.from_numpy(stepper._host_pos))
        return outs, used

    spanned, used = run(None)
    assert used == [32] * 6 + [16] * 6
    whole, used = run([64])
    assert used == [64] * 12
    for a, b in zip(spanned, whole, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("greedy", [[True, True, True], [False, True, False]])
def test_the_fused_draw_steps_the_same_codes(tiny_checkpoints, model: Qwen3TTS, greedy: list[bool]) -> None:
    """Every draw through engine.fused_draw (Triton's interpreter without a GPU), as a model bound
    to `Kernels(fused_draw=True)` makes them: the same 16 codes and next code 0 for greedy and
    sampling rows, in float32."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if torch.cuda.is_available():
        model = Qwen3TTS.load(tiny_checkpoints["custom_voice"], device=device)
    drawn = Qwen3TTS.load(tiny_checkpoints["custom_voice"], device=device)  # the same weights
    drawn.use_kernels(Kernels(fused_draw=True))
    plain = _run(model, FrameStepper(model.talker, SLOTS, 64, pad=True), greedy)
    fused = _run(drawn, FrameStepper(drawn.talker, SLOTS, 64, pad=True), greedy)
    for a, b in zip(plain, fused, strict=True):
        assert torch.equal(a, b)
    assert sum(len(out) for out in fused) == 12  # every active row of the six steps compared


def test_graphs_need_cuda(model: Qwen3TTS) -> None:
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        FrameStepper(model.talker, SLOTS, 64, graphs=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize(
    ("dtype", "fused_draw"), [("float32", False), ("bfloat16", False), ("bfloat16", True)]
)
def test_graphed_steps_equal_eager_steps_on_cuda(tiny_checkpoints, dtype: str, fused_draw: bool) -> None:
    model = Qwen3TTS.load(tiny_checkpoints["custom_voice"], device="cuda", dtype=dtype)
    # The draw kernel alone (with PDL where the GPU has it), as an engine with fuse_kernels off.
    config = EngineConfig(device="cuda", fuse_kernels=False, fused_draw=fused_draw)
    model.use_kernels(Kernels.resolve(config, model.device))
    for greedy in ([True, True, True], [False, True, False]):
        eager_stepper = FrameStepper(model.talker, SLOTS, 64, pad=True)
        eager = _run(model, eager_stepper, greedy, steps=40)
        graphed_stepper = FrameStepper(model.talker, SLOTS, 64, graphs=True)
        graphed_stepper.capture()
        graphed = _run(model, graphed_stepper, greedy, steps=40)
        for a, b in zip(eager, graphed, strict=True):
            assert torch.equal(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fused kernels are compiled on CUDA only")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor touches torch.jit while compiling
def test_fused_graphed_steps_equal_fused_eager_steps_on_cuda(tiny_checkpoints) -> None:
    """The compiled pieces and fused layer on, the draw kernel off. The capture comes first, as in
    the engine: torch.compile generates kernels as new shapes arrive, and which one serves a shape
    depends on what was compiled before, so a first eager run (before capture) can differ in
    rounding from every later run, graphed or not, on the same shapes."""
    model = Qwen3TTS.load(tiny_checkpoints["custom_voice"], device="cuda", dtype="bfloat16")
    model.use_kernels(Kernels.resolve(EngineConfig(device="cuda", fused_draw=False), model.device))
    greedy = [True, False, True]
    graphed_stepper = FrameStepper(model.talker, SLOTS, 64, graphs=True)
    graphed_stepper.capture()
    eager = _run(model, FrameStepper(model.talker, SLOTS, 64, pad=True), greedy, steps=40, together=True)
    graphed = _run(model, graphed_stepper, greedy, steps=40, together=True)
    for a, b in zip(eager, graphed, strict=True):
        assert torch.equal(a, b)


def test_a_step_costs_the_host_one_torch_call(model: Qwen3TTS) -> None:
    """Besides the step itself (a replay, graphed), a step makes one torch call: the copy of its
    inputs in, staged with byte copies. Staged settings add their own copies, once."""
    stepper = FrameStepper(model.talker, SLOTS, 64, pad=True)
    _run(model, stepper, [True, False, True], steps=1)
    counted = TorchCalls()
    stepper._compute = counted.uncounted(stepper._compute)
    with torch.inference_mode(), counted:
        out = stepper.step(3, [True, False, True], [5, 6, 7])
    assert out.shape == (3, 18)
    assert counted.calls == Counter({"copy_": 1})
    assert stepper.inputs[:4].tolist() == [[1, 5], [0, 6], [1, 7], [0, 0]]  # padded to the bucket of 4


def test_slot_settings_are_staged_and_written_together(tiny_models) -> None:
    """configure() writes nothing to the device; the next prefill or step (or apply_settings)
    writes every staged slot's settings, and leaves the other slots as they were."""
    model = tiny_models["custom_voice"]
    stepper = FrameStepper(model.talker, 4, 64)
    sampled = GenerationOptions(
        SamplingParams(True, 0.7, 30, 0.9), SamplingParams(True, 0.5, 10, 0.8), 1.2, suppress_eos=True
    )
    greedy = GenerationOptions.from_generation_config(model.generation_config, greedy=True)
    with torch.inference_mode():
        stepper.rounds[:] = 9
        stepper.configure(3, sampled, seed=2**64 + 5)
        stepper.configure(1, greedy, seed=7)
        assert stepper.seed.tolist() == [0, 0, 0, 0] and stepper.rounds.tolist() == [9] * 4
        assert stepper.draws[3] is Draw.TOP_K and stepper.draws[1] is Draw.GREEDY  # host side: at once
        stepper.apply_settings()
    assert stepper.seed.tolist() == [0, 7, 0, 5]  # folded to 63 bits
    assert stepper.rounds.tolist() == [9, 0, 9, 0]
    assert stepper.penalty.tolist() == pytest.approx([1.0, greedy.repetition_penalty, 1.0, 1.2])
    assert stepper.suppress_eos.tolist() == [False, False, False, True]
    talker, predictor = stepper.talker_sampling, stepper.predictor_sampling
    assert talker.do_sample.tolist() == [False, False, False, True]
    assert talker.temperature.tolist() == pytest.approx([1.0, greedy.talker.temperature, 1.0, 0.7])
    assert talker.top_k.tolist() == [0, greedy.talker.top_k, 0, 30]
    assert talker.top_p.tolist() == pytest.approx([1.0, greedy.talker.top_p, 1.0, 0.9])
    assert predictor.do_sample.tolist() == [False, False, False, True]
    assert predictor.temperature.tolist() == pytest.approx([1.0, greedy.predictor.temperature, 1.0, 0.5])
    assert predictor.top_k.tolist() == [0, greedy.predictor.top_k, 0, 10]
    assert predictor.top_p.tolist() == pytest.approx([1.0, greedy.predictor.top_p, 1.0, 0.8])
