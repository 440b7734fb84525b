"""The scheduler stepped by hand, with a sink that records what it is given."""

import itertools
from types import SimpleNamespace

import pytest
import torch

from voicewire.engine.config import EngineConfig, GenerationOptions, PrefillWait, StreamOptions
from voicewire.engine.errors import StreamFailed
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime import scheduler as scheduler_module
from voicewire.engine.runtime.scheduler import Scheduler
from voicewire.engine.runtime.segments import SegmentPolicy, TrackEntry
from voicewire.engine.runtime.stream import SAMPLE_RATE, Stream

_ids = itertools.count(1)


class Recorder:
    def __init__(self) -> None:
        self.codes: dict[int, list[torch.Tensor]] = {}
        self.fed: dict[int, list[TrackEntry]] = {}
        self.segment_ends: dict[int, list[bool]] = {}
        self.ends_at: dict[int, list[int]] = {}  # frames received at each segment end
        self.closed: dict[int, tuple] = {}

    def open(self, stream: Stream, warmup) -> None:
        self.codes[stream.id], self.fed[stream.id], self.segment_ends[stream.id] = [], [], []
        self.ends_at[stream.id] = []

    def frames(self, streams, codes, fed, fence=None) -> None:
        for stream, row, entry in zip(streams, codes, fed, strict=True):
            self.codes[stream.id].append(torch.from_numpy(row))
            self.fed[stream.id].append(entry)

    def segment_end(self, stream: Stream, flushed: bool) -> None:
        self.segment_ends[stream.id].append(flushed)
        self.ends_at[stream.id].append(len(self.codes[stream.id]))

    def drain(self, stream: Stream) -> None:
        pass

    def close(self, stream: Stream, reason: str, frames: int, end_step: int) -> None:
        self.closed[stream.id] = (reason, None)

    def drop(self, stream: Stream, reason: str, frames: int, end_step: int, error) -> None:
        self.closed[stream.id] = (reason, error)


@pytest.fixture(scope="module")
def model(tiny_models) -> Qwen3TTS:
    return tiny_models["custom_voice"]


def _scheduler(model: Qwen3TTS, max_ahead_samples: int | None = None, **config) -> tuple[Scheduler, Recorder]:
    recorder = Recorder()
    return Scheduler(model.parts(), EngineConfig(**config), recorder, max_ahead_samples), recorder


def _submit(model: Qwen3TTS, scheduler: Scheduler, speaker: str = "vivian", **options) -> Stream:
    """A greedy stream with EOS suppressed, handed to the scheduler with no text yet."""
    opts = StreamOptions(greedy=True, suppress_eos=True, **options)
    stream = Stream(
        next(_ids), model.voice(speaker=speaker, language="english"), opts, model.tokenizer, lambda: None
    )
    generation = GenerationOptions.from_generation_config(
        model.generation_config, greedy=True, suppress_eos=True
    )
    scheduler.submit(stream, generation, lookahead=3)
    return stream


def _open(model: Qwen3TTS, scheduler: Scheduler, text: str, speaker: str = "vivian", **options) -> Stream:
    stream = _submit(model, scheduler, speaker, **options)
    stream.push_text(text)
    stream.end()
    return stream


def _run(scheduler: Scheduler, recorder: Recorder, streams: list[Stream]) -> None:
    with torch.inference_mode():
        while not all(s.id in recorder.closed for s in streams):
            assert scheduler.step(), "the scheduler stalled"


def test_a_non_finite_stream_fails_alone(model: Qwen3TTS) -> None:
    scheduler, recorder = _scheduler(model, max_streams=2, kv_length=128)
    good = _open(model, scheduler, "A steady voice keeps going.", max_frames=12)
    bad = _open(model, scheduler, "This one breaks.", speaker="ryan", max_frames=12)
    with torch.inference_mode():
        for _ in range(4):
            scheduler.step()
    scheduler.stepper.cache.k[:, 1] = float("nan")  # a fault in the bad stream's slot only
    _run(scheduler, recorder, [good, bad])
    reason, error = recorder.closed[bad.id]
    assert reason == "error" and isinstance(error, StreamFailed) and "non-finite" in str(error)
    assert recorder.closed[good.id] == ("max_frames", None)
    # The failed stream's slot was cleared: streams that take both slots next speak normally.
    later = [_open(model, scheduler, "A fresh stream after the fault.", max_frames=12) for _ in range(2)]
    _run(scheduler, recorder, later)
    assert [recorder.closed[s.id] for s in later] == [("max_frames", None)] * 2

    alone, alone_recorder = _scheduler(model, max_streams=2, kv_length=128)
    solo = _open(model, alone, "A steady voice keeps going.", max_frames=12)
    _run(alone, alone_recorder, [solo])
    assert torch.equal(torch.stack(recorder.codes[good.id]), torch.stack(alone_recorder.codes[solo.id]))
    assert scheduler.streams.used_slots == 0 and scheduler.streams.count == 0


def test_a_sequence_cut_short_by_the_kv_bound_keeps_its_text(model: Qwen3TTS) -> None:
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " * 3
    scheduler, recorder = _scheduler(model, max_streams=1, kv_length=64, segments=SegmentPolicy(None, None))
    stream = _open(model, scheduler, text.strip(), max_frames=400)
    _run(scheduler, recorder, [stream])
    fed = recorder.fed[stream.id]
    spoken = [t.id for entry in fed for t in entry.tokens]
    assert spoken == model.tokenizer.encode(text.strip())  # every token entered once, in order
    assert len(recorder.segment_ends[stream.id]) >= 2  # the text needed several talker sequences
    assert recorder.closed[stream.id][0] in ("end", "max_frames")


def test_a_restart_reuses_the_voice_prefix(model: Qwen3TTS, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = "The first sentence ends here.", " And a second one follows it."
    policy = SegmentPolicy(sentence_tokens=3, max_tokens=None)
    scheduler, recorder = _scheduler(model, max_streams=1, kv_length=96, segments=policy)
    starts: list[int] = []
    prefill = scheduler.stepper.prefill
    monkeypatch.setattr(
        scheduler.stepper,
        "prefill",
        lambda prompts: starts.extend(start for _, _, start in prompts) or prefill(prompts),
    )
    stream = _open(model, scheduler, first + second)
    _run(scheduler, recorder, [stream])
    ids = [entry.id for entry in recorder.fed[stream.id]]
    eos = model.text_ids.tts_eos
    assert ids.count(eos) == 2 and len(starts) == 2
    prefix = starts[1]
    assert starts[0] == 0 and prefix == 9  # role 3 + 5 control rows + speaker: kept, not recomputed
    frames_first = 96 - (prefix + 1)  # each sequence runs to its KV bound (EOS suppressed)
    second_codes = torch.stack(recorder.codes[stream.id][frames_first:])

    # A fresh stream speaking only the second sentence gives the same frames: same voice prefix KV.
    fresh, fresh_recorder = _scheduler(model, max_streams=1, kv_length=96, segments=policy)
    solo = _open(model, fresh, second, max_frames=second_codes.shape[0])
    _run(fresh, fresh_recorder, [solo])
    assert torch.equal(second_codes, torch.stack(fresh_recorder.codes[solo.id]))


def test_a_slot_at_the_kv_bound_can_sit_beside_stepping_streams(model: Qwen3TTS) -> None:
    # Slot 0 runs its sequence to the last KV position and then waits for text; slot 1 keeps
    # stepping, so slot 0 rides along in the batch without stepping.
    scheduler, recorder = _scheduler(model, max_streams=2, kv_length=64, segments=SegmentPolicy(None, None))
    first = Stream(
        next(_ids),
        model.voice(speaker="vivian"),
        StreamOptions(greedy=True, suppress_eos=True),
        model.tokenizer,
        lambda: None,
    )
    generation = GenerationOptions.from_generation_config(
        model.generation_config, greedy=True, suppress_eos=True
    )
    scheduler.submit(first, generation, lookahead=1)
    first.push_text("A short one.")
    first.flush()  # its sequence runs to the KV bound; then it waits for more text
    with torch.inference_mode():
        while len(recorder.segment_ends.get(first.id, [])) < 1:
            assert scheduler.step()
    assert int(scheduler.stepper.pos[0]) == 64
    second = _open(model, scheduler, "Another stream steps on.", max_frames=30)
    _run(scheduler, recorder, [second])
    assert recorder.closed[second.id] == ("max_frames", None) and len(recorder.codes[second.id]) == 30
    first.end()
    _run(scheduler, recorder, [first])


def test_a_frame_launched_past_eos_is_taken_back(model: Qwen3TTS, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step k+1 is launched before step k is read, so a sequence that ends with EOS at k has one
    more frame in flight. It is dropped, its text stays for the next sequence, and its noise round
    is returned: the slot's draw counter equals the frames kept plus one per prefill."""
    scheduler, recorder = _scheduler(model, max_streams=1, kv_length=96, segments=SegmentPolicy(None, None))
    stream = Stream(
        next(_ids), model.voice(speaker="vivian"), StreamOptions(seed=7), model.tokenizer, lambda: None
    )
    sampled = GenerationOptions.from_generation_config(model.generation_config, suppress_eos=True)
    scheduler.submit(stream, sampled, lookahead=1)
    text = "one two three four five six seven eight nine ten"
    stream.push_text(text)
    stream.end()
    eos, launches = model.talker.cfg.codec_eos_id, itertools.count(1)
    step = scheduler.stepper.step

    def step_with_eos(n, active, ids):
        out = step(n, active, ids)
        if next(launches) == 5:  # the fifth frame's code 0 says EOS; the sixth is already queued
            out[0, -2] = eos
        return out

    monkeypatch.setattr(scheduler.stepper, "step", step_with_eos)
    prefills = []
    prefill = scheduler.stepper.prefill
    monkeypatch.setattr(scheduler.stepper, "prefill", lambda prompts: prefills.append(1) or prefill(prompts))
    _run(scheduler, recorder, [stream])

    kept = len(recorder.codes[stream.id])
    assert recorder.ends_at[stream.id] == [5, kept] and len(prefills) == 2  # the EOS frame is the last
    spoken = [t.id for entry in recorder.fed[stream.id] for t in entry.tokens]
    assert spoken == model.tokenizer.encode(text)  # every token entered once, in order
    assert int(scheduler.stepper.rounds[0]) == kept + len(prefills)
    assert scheduler.steps == kept + 1  # the step whose only frame was dropped still counts


def test_ready_sequences_wait_for_company_while_the_talker_steps(
    model: Qwen3TTS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prefill_wait: with a step in flight, a sequence ready to start waits until `prompts` are
    ready or it has waited `max_s`; with the talker idle it starts at once."""
    clock = [100.0]
    monkeypatch.setattr(scheduler_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    scheduler, recorder = _scheduler(
        model, max_streams=4, kv_length=128, prefill_wait=PrefillWait(max_s=0.05, prompts=2)
    )
    rounds: list[list[int]] = []
    prefill = scheduler.stepper.prefill
    monkeypatch.setattr(
        scheduler.stepper,
        "prefill",
        lambda prompts: (rounds.append([s for s, _, _ in prompts]), prefill(prompts)),
    )

    def started(stream: Stream) -> bool:
        return any(live.stream is stream and live.started for live in scheduler.streams.live)

    with torch.inference_mode():
        first = _open(model, scheduler, "The first voice starts alone.", max_frames=30)
        scheduler.step()
        assert started(first) and len(rounds) == 1  # nothing in flight: no wait
        second = _open(model, scheduler, "A second one waits.", max_frames=30)
        for _ in range(3):
            clock[0] += 0.01
            scheduler.step()
        assert not started(second)  # 30 ms of 50, one ready: it waits
        third = _open(model, scheduler, "A third joins it.", max_frames=30)
        scheduler.step()
        assert started(second) and started(third) and len(rounds[-1]) == 2  # two ready: one round
        fourth = _open(model, scheduler, "A fourth waits out its time.", max_frames=30)
        scheduler.step()
        assert not started(fourth)
        clock[0] += 0.051
        scheduler.step()
        assert started(fourth) and len(rounds[-1]) == 1
    _run(scheduler, recorder, [first, second, third, fourth])
    assert len(rounds) == 3
    assert all(recorder.closed[s.id] == ("max_frames", None) for s in (first, second, third, fourth))


def test_rounds_with_nothing_to_step_count_what_the_streams_wait_for(
    model: Qwen3TTS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round in which no open stream can step says why each waits (idle_streams) and times the
    wait until the next round (idle_wait)."""
    clock = [50.0]
    monkeypatch.setattr(scheduler_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    scheduler, recorder = _scheduler(model, max_streams=2, kv_length=128)
    metrics = scheduler.metrics

    def idle(reason: str) -> float:
        return (
            metrics.registry.get_sample_value("voicewire_engine_idle_streams_total", {"reason": reason})
            or 0.0
        )

    with torch.inference_mode():
        stream = _submit(model, scheduler, max_frames=30)
        assert scheduler.step()  # admitted
        assert not scheduler.step() and idle("start") == 1  # no text yet: its sequence cannot start
        clock[0] += 0.03
        stream.push_text("Short words, then a pause")
        assert scheduler.step()  # the wait ended: 30 ms
        waits = metrics.histograms()["voicewire_engine_idle_wait_seconds"]
        assert waits[float("inf")] == 1 and waits[-1.0] == pytest.approx(0.03)
        while scheduler.step():  # it speaks what it has, then waits for text
            pass
        assert idle("text") >= 1 and recorder.codes[stream.id]
        stream.end()
        _run(scheduler, recorder, [stream])
    assert recorder.closed[stream.id] == ("max_frames", None)
    assert idle("listener") == idle("end") == 0


def test_a_stream_ahead_of_its_listener_waits_for_it(model: Qwen3TTS) -> None:
    """Backpressure: with a second of audio unread, the stream is left out of the steps, and the
    idle round says it waits for its listener; once read, it steps again."""
    scheduler, recorder = _scheduler(model, max_ahead_samples=SAMPLE_RATE, max_streams=2, kv_length=128)
    with torch.inference_mode():
        stream = _submit(model, scheduler, max_frames=30)
        stream.push_text("Short words, then a pause, then more words to say.")
        for _ in range(4):
            scheduler.step()
        frames = len(recorder.codes[stream.id])
        assert frames >= 1
        stream.delivered_samples = SAMPLE_RATE  # the decoder sent a second its listener has not read
        while scheduler.step():  # the frames in flight come back; nothing new is launched
            pass
        waiting = len(recorder.codes[stream.id])
        assert not scheduler.step() and len(recorder.codes[stream.id]) == waiting
        listener = scheduler.metrics.registry.get_sample_value(
            "voicewire_engine_idle_streams_total", {"reason": "listener"}
        )
        assert listener >= 1
        stream.consumed_samples = SAMPLE_RATE  # read
        assert scheduler.step()
        while scheduler.step():
            pass
        assert len(recorder.codes[stream.id]) > waiting
