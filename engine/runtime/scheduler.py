"""The scheduler: the talker side of the async_chunk pipeline.

Each `step()` takes in new streams and their text, starts talker sequences that have enough text
(one batched prefill of a few per step, so live streams never stall), then launches one batched frame for
every stream whose text track can feed it, and hands the previous step's frames to a `FrameSink` (the
decoder stage). Steps are pipelined: step k+1 is queued on the GPU before the host reads step k, so
the GPU does not wait for the host's bookkeeping. A stream that ends its sequence with EOS at step k
is already in step k+1: that frame is taken back (its text returns to the segment, its noise round
to the slot) and dropped. With `first_chunk_alone`, at light load a step that completes a new
stream's first chunk is read before the next is launched, and the next waits on the GPU for that
chunk's decoder pass (a `PassFence`), so the pass does not share the GPU with a step.
A stream that has run out of text before a flush or the end is simply left out of the batch: it
waits, keeping its slot and KV, and no tts_pad is fed. Streams that finish, fail or are cancelled
free their slot in the same step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from voicewire.engine.config import EngineConfig, GenerationOptions
from voicewire.engine.errors import EngineError, StreamFailed
from voicewire.engine.model.prompt import Rows, embed_rows, segment_can_start, segment_rows
from voicewire.engine.model.qwen3_tts import ModelParts
from voicewire.engine.runtime.backend import FrameSink, PassFence
from voicewire.engine.runtime.decode_stage import TALKER_PRIORITY
from voicewire.engine.runtime.frame_step import MIN_FRAMES, FrameStepper
from voicewire.engine.runtime.live_streams import LiveStream, LiveStreams
from voicewire.engine.runtime.metrics import EngineMetrics
from voicewire.engine.runtime.segments import Segment, TrackEntry
from voicewire.engine.runtime.stream import Stream

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # the loop sleeps this long at most when no stream can step


@dataclass(eq=False)
class _SlotStream(LiveStream):
    """A live stream with what this backend keeps of its talker sequence in its KV slot."""

    frame_cap: int = 0  # frames the running segment may still reach (KV bound)
    started: bool = False  # the voice prefix is in the KV cache
    in_flight: int = 0  # frames of this stream in launched steps not read yet
    ready_since: float | None = None  # when its next sequence was first ready to start (prefill_wait)


@dataclass(eq=False)
class _Prompt:
    """A talker sequence ready to prefill: its rows go in at positions start.."""

    live: _SlotStream
    segment: Segment
    rows: Rows
    start: int
    held: int  # text tokens of the segment inside the prompt


@dataclass
class _Launched:
    """A step on its way: who it stepped (stream, segment, what it was fed) and its outputs, copied
    to host memory once `done` (None off CUDA, where the copy has already happened)."""

    rows: list[tuple[_SlotStream, Segment, TrackEntry]]
    out: Tensor  # [n, 18]: 16 codes, next code 0, finite
    done: torch.cuda.Event | None
    at: float  # time.monotonic() at launch


class Scheduler:
    def __init__(
        self,
        parts: ModelParts,
        config: EngineConfig,
        sink: FrameSink,
        max_ahead_samples: int | None,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.metrics = metrics or EngineMetrics()
        self.parts = parts
        self.config = config
        self.sink = sink
        self.max_ahead_samples = max_ahead_samples
        on_cuda = parts.talker.codec_head.weight.device.type == "cuda"
        self.stepper = FrameStepper(
            parts.talker,
            config.max_streams,
            config.kv_length,
            graphs=config.cuda_graphs and on_cuda,
            max_prefills=config.max_prefills_per_step,
        )
        if config.cuda_graphs and on_cuda:
            self.stepper.capture()
        self.steps = 0
        self.streams = LiveStreams(
            _SlotStream, parts, sink, config.max_streams, config.segments, lambda: self.steps
        )
        self._wake_event = threading.Event()
        self._progress = False
        self._launched: _Launched | None = None
        # Page-locked copies of the steps' outputs, used in turn: step k+2 is launched after step k
        # is read (one step in flight), so two suffice. One allocation a step would let go of the GIL.
        outputs = self.stepper.outputs
        self._host_outputs = [
            torch.empty(outputs.shape, dtype=outputs.dtype, pin_memory=outputs.is_cuda) for _ in range(2)
        ]
        self._turn = 0
        self._last_collect: float | None = None  # when the last step's outputs reached the host
        self._idle_since: float | None = None  # when a round with open streams found nothing to do

    # --- any thread ----------------------------------------------------------------------------

    def submit(self, stream: Stream, options: GenerationOptions, lookahead: int) -> None:
        """Queue a new stream; raises EngineFull when every slot is taken."""
        self.streams.submit(stream, options, lookahead)

    def wake(self) -> None:
        self._wake_event.set()

    def wait_ready(self, timeout: float) -> None:
        """Ready once built: the weights are loaded and the graphs captured."""

    # --- the scheduler's thread ----------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Step until `stop`, sleeping while no stream can step."""
        device = self.stepper.device
        # Not the legacy default stream: work queued there blocks the decoder's streams until it drains.
        own_stream = (
            torch.cuda.stream(torch.cuda.Stream(device, priority=TALKER_PRIORITY))
            if device.type == "cuda"
            else None
        )
        try:
            with own_stream or contextlib.nullcontext():
                while not stop.is_set():
                    self._wake_event.clear()
                    if not self.step():
                        self._wake_event.wait(IDLE_WAIT_S)
        except BaseException as exc:  # a bug, not a stream's fault: kept for the engine to report
            log.exception("the scheduler stopped")
            self.streams.stopped(exc)

    @torch.inference_mode()
    def step(self) -> bool:
        """One scheduling round; returns whether anything happened (False: all streams wait)."""
        self._progress = False
        if self._idle_since is not None:
            self.metrics.idle_wait.observe(time.monotonic() - self._idle_since)
            self._idle_since = None
        incoming = self.streams.take_incoming()
        if incoming and self.stepper.device.type == "cuda":
            # Voices were made on the callers' default stream; this thread may run on its own.
            torch.cuda.current_stream(self.stepper.device).wait_stream(
                torch.cuda.default_stream(self.stepper.device)
            )
        for live in incoming:
            if self.streams.admit(live):
                self.stepper.configure(live.slot, live.options, live.seed)
        for live in list(self.streams.live):
            if self.streams.drain(live):
                self._release(live, "cancelled")
        prompts: list[_Prompt] = []
        for live in list(self.streams.live):
            if len(prompts) < self.config.max_prefills_per_step:
                prompt = self._advance(live)
                if prompt is not None:
                    prompts.append(prompt)
        if prompts and self._prefills_wait(prompts):
            prompts = []  # still ready next round, with any that join them
        if prompts:
            self._start(prompts)
        fence = self._fence(self._launched)
        if fence is not None:
            # Read before the next launch, which then waits for the first chunk's pass on the GPU.
            assert self._launched is not None
            self._collect(self._launched, fence)
            self._launched = None
            event = fence.wait(self.config.first_chunk_alone.wait_s)
            if event is not None:
                torch.cuda.current_stream(self.stepper.device).wait_event(event)
        ready = [live for live in self.streams.live if self._ready(live)]
        launched = self._launch(ready) if ready else None
        if self._launched is not None:
            self._collect(self._launched)
        self._launched = launched
        for live in self.streams.live:
            if not live.starved and not live.in_flight and self._waiting_for_text(live):
                # Frames held back for a bigger chunk would wait for the text too: let them out.
                live.starved = True
                self.sink.drain(live.stream)
        if launched is None:
            self._last_collect = None
        busy = self._progress or bool(incoming) or bool(prompts) or launched is not None
        if not busy and self.streams.live:
            self._idle_since = time.monotonic()
            for live in self.streams.live:
                self.metrics.idle_streams.labels(self._waiting_on(live)).inc()
        return busy

    def _fence(self, launched: _Launched | None) -> PassFence | None:
        """A fence for the streams whose first chunk the launched step completes, if it steps at
        most `first_chunk_alone.rows` streams (`config.FirstChunkAlone`)."""
        if launched is None or not 0 < len(launched.rows) <= self.config.first_chunk_alone.rows:
            return None
        first = [
            live.stream.id
            for live, _, _ in launched.rows
            if live.frames + 1 == (live.stream.options.chunks or self.config.chunks).first_frames
        ]
        return PassFence(first) if first else None

    def _advance(self, live: _SlotStream) -> _Prompt | None:
        """The stream's next talker sequence, if it has enough text to start."""
        while not live.released:
            segment = live.segments.head
            if segment is None:
                if live.ended:
                    self._release(live, "length" if live.cut else "end")
                return None
            if segment.start >= 0:
                return None
            if segment.complete and segment.body == 0:  # a flush with nothing new to say
                live.segments.segments.popleft()
                self._progress = True
                self.sink.segment_end(live.stream, segment.flushed)
                continue
            return self._prompt(live, segment)
        return None

    def _prompt(self, live: _SlotStream, segment: Segment) -> _Prompt | None:
        voice = live.voice
        assert voice is not None
        layout = live.stream.options.layout
        if not segment_can_start(voice, len(segment.seq), segment.complete, layout):
            return None
        if not segment.complete and segment.body < live.lookahead:
            return None
        try:
            rows, held = segment_rows(voice, segment.seq, layout)
            # The first sequence runs the voice prefix too; later ones reuse its KV.
            start = len(voice.prefix) if live.started else 0
            if not live.started:
                rows = voice.prefix + rows
            self.stepper.check_prompt(start, len(rows))  # here, so one bad prompt fails alone
        except Exception as exc:
            self._fail(live, exc)
            return None
        return _Prompt(live, segment, rows, start, held)

    def _prefills_wait(self, prompts: list[_Prompt]) -> bool:
        """Whether this round's ready sequences wait for more (`config.prefill_wait`): only while a
        step is in flight, fewer than `prompts` are ready and none has waited `max_s`."""
        wait = self.config.prefill_wait
        enough = min(wait.prompts, self.config.max_prefills_per_step)
        if wait.max_s <= 0 or self._launched is None or len(prompts) >= enough:
            return False
        now = oldest = time.monotonic()
        for p in prompts:
            if p.live.ready_since is None:
                p.live.ready_since = now
            oldest = min(oldest, p.live.ready_since)
        return now - oldest < wait.max_s

    def _embed(self, prompts: list[_Prompt]) -> list[tuple[_Prompt, Tensor]]:
        """Each prompt's rows as vectors [T, H]. Prompts whose voices carry no x-vector or reference
        codes share one call: a round may start dozens, and each call is a dozen small launches.
        A failed call fails its own streams only."""
        shared: list[_Prompt] = []
        alone: list[_Prompt] = []
        for p in prompts:
            assert p.live.voice is not None  # admitted
            plain = p.live.voice.xvector is None and p.live.voice.ref_codes is None
            (shared if plain else alone).append(p)
        groups = ([shared] if shared else []) + [[p] for p in alone]
        embedded: list[tuple[_Prompt, Tensor]] = []
        for group in groups:
            voice = group[0].live.voice
            assert voice is not None  # admitted
            joined = Rows([i for p in group for i in p.rows.text], [i for p in group for i in p.rows.codec])
            try:
                vectors = embed_rows(self.parts.talker, joined, voice.xvector, voice.ref_codes)
            except Exception as exc:
                for p in group:
                    self._fail(p.live, exc)
                continue
            embedded += zip(group, vectors.split([len(p.rows) for p in group]), strict=True)
        return embedded

    def _start(self, prompts: list[_Prompt]) -> None:
        """Prefill the new talker sequences together."""
        started = time.monotonic()
        embedded = self._embed(prompts)
        if not embedded:
            return
        prompts = [p for p, _ in embedded]
        try:
            self.stepper.prefill([(p.live.slot, rows, p.start) for p, rows in embedded])
        except Exception as exc:
            log.exception("prefill failed for %d streams", len(prompts))
            for p in prompts:
                self._fail(p.live, exc)
            return
        self.metrics.prefill.observe(time.monotonic() - started)
        self.metrics.prefill_streams.observe(len(prompts))
        for p in prompts:
            live = p.live
            live.started = True
            live.ready_since = None
            p.segment.start = p.held
            live.prefilled = [t for t in p.segment.tokens[: p.held] if t is not None]
            live.frame_cap = self.config.kv_length - (p.start + len(p.rows))
            if live.frame_cap < MIN_FRAMES:
                self._fail(live, ValueError(f"kv_length {self.config.kv_length} leaves no room to speak"))

    def _ready(self, live: _SlotStream) -> bool:
        segment = live.segments.head
        if live.released or segment is None or segment.start < 0:
            return False
        if segment.frames >= live.frame_cap:
            return False  # its last frame is in flight: the sequence ends there
        guard = self._guard_frames(live, segment)
        if guard is not None and segment.frames >= guard:
            return False  # likewise, at the speech guard's bound
        if live.max_frames is not None and live.frames + live.in_flight >= live.max_frames:
            return False
        if self._waiting_for_text(live):
            return False
        return not self._ahead_of_listener(live)

    def _ahead_of_listener(self, live: _SlotStream) -> bool:
        """Backpressure: more audio unread by the stream's consumer than `max_buffered_seconds`."""
        return self.max_ahead_samples is not None and live.stream.unread_samples >= self.max_ahead_samples

    def _waiting_on(self, live: _SlotStream) -> str:
        """Why a stream that is not `_ready` waits, for the idle metrics: its sequence has not
        started (too little text yet, or the prefill wait), it waits for text, for its listener to
        read, or for its last frame in flight."""
        segment = live.segments.head
        if segment is None or segment.start < 0:
            return "start"
        if self._waiting_for_text(live):
            return "text"
        if self._ahead_of_listener(live):
            return "listener"
        return "end"

    def _waiting_for_text(self, live: _SlotStream) -> bool:
        segment = live.segments.head
        return (
            segment is not None
            and segment.start >= 0
            and segment.next_id(self.parts.text_ids.tts_pad) is None
        )

    def _launch(self, ready: list[_SlotStream]) -> _Launched | None:
        """Queue one frame for the ready streams; `segment.frames` counts the frames fed."""
        n = max(live.slot for live in ready) + 1
        active = [False] * n
        ids = [self.parts.text_ids.tts_pad] * n
        rows: list[tuple[_SlotStream, Segment, TrackEntry]] = []
        for live in ready:
            segment = live.segments.head
            assert segment is not None
            next_id = segment.next_id(self.parts.text_ids.tts_pad)
            assert next_id is not None
            active[live.slot] = True
            live.starved = False
            ids[live.slot] = next_id[0]
            tokens = (*live.prefilled, *([next_id[1]] if next_id[1] is not None else []))
            rows.append((live, segment, TrackEntry(next_id[0], tokens)))
            live.prefilled = []
        started = time.monotonic()
        if self._last_collect is not None:
            self.metrics.step_gap.observe(started - self._last_collect)
        try:
            out = self.stepper.step(n, active, ids)
            host = self._host_outputs[self._turn][: out.shape[0]]
            self._turn ^= 1
            host.copy_(out, non_blocking=True)
            done = None
            if out.is_cuda:
                done = torch.cuda.Event()
                done.record()
        except Exception as exc:
            log.exception("batched step failed for %d streams", len(ready))
            for live in ready:
                self._fail(live, exc)
            return None
        for live, segment, _ in rows:
            segment.frames += 1
            live.in_flight += 1
        return _Launched(rows, host, done, started)

    def _collect(self, launched: _Launched, fence: PassFence | None = None) -> None:
        """Read a launched step and hand its frames on (with `fence`, which opens at once if none
        go); streams whose sequence ended at EOS in the step before have their frame in this one
        taken back."""
        if not self._read(launched, fence) and fence is not None:
            fence.open()

    def _read(self, launched: _Launched, fence: PassFence | None) -> bool:
        """`_collect`; returns whether any frames went to the sink."""
        try:
            if launched.done is not None:
                launched.done.synchronize()  # the one wait for the GPU per step
            out = launched.out.numpy()
        except Exception as exc:
            log.exception("batched step failed for %d streams", len(launched.rows))
            for live, _, _ in launched.rows:
                live.in_flight -= 1
                self._fail(live, exc)
            return False
        done = self._last_collect = time.monotonic()
        self.metrics.step.observe(done - launched.at)
        self.metrics.step_streams.observe(len(launched.rows))
        frame, code0, finite = out[:, :-2], out[:, -2].tolist(), out[:, -1].tolist()
        self.steps += 1
        self._progress = True
        ok, ok_fed = [], []
        for live, segment, entry in launched.rows:
            live.in_flight -= 1
            if live.released or segment is not live.segments.head:
                continue  # cancelled, failed, or past its sequence's EOS (taken back already)
            if finite[live.slot]:
                ok.append(live)
                ok_fed.append(entry)
            else:
                self.stepper.clear(live.slot)
                self._fail(live, StreamFailed("the talker produced non-finite values for this stream"))
        if not ok:
            return False
        self.metrics.frames.inc(len(ok))
        for live in ok:
            first_text = live.stream.first_text_at
            if live.frames == 0 and first_text is not None:
                self.metrics.first_frame.observe(done - first_text)
        self.sink.frames([live.stream for live in ok], frame[[live.slot for live in ok]], ok_fed, fence)
        eos = self.parts.talker.cfg.codec_eos_id
        for live in ok:
            head = live.segments.head
            assert head is not None
            segment = head
            live.frames += 1
            read = segment.frames - live.in_flight  # the segment's frames read so far
            guard = self._guard_frames(live, segment)
            if live.max_frames is not None and live.frames >= live.max_frames:
                self._release(live, "max_frames")
            elif code0[live.slot] == eos or read >= live.frame_cap or (guard is not None and read >= guard):
                live.cut = code0[live.slot] != eos and guard is not None and read >= guard
                if live.cut:
                    log.info(
                        "stream %d: no end of speech %d frames into a sequence; ended", live.stream.id, read
                    )
                elif code0[live.slot] != eos and not live.options.suppress_eos:
                    log.warning("stream %d: a segment reached the KV bound (%d frames)", live.stream.id, read)
                if live.in_flight:  # the next step fed it once more: take that frame back
                    segment.frames -= 1
                    self.stepper.take_back(live.slot)
                self._end_segment(live)
        return True

    def _guard_frames(self, live: _SlotStream, segment: Segment) -> int | None:
        """The speech guard's bound on this sequence (None: not guarded, or text still coming)."""
        if live.max_frames is not None or live.options.suppress_eos:
            return None
        return self.config.speech_guard.frames(segment)

    def _end_segment(self, live: _SlotStream) -> None:
        """The running talker sequence is over; text it did not reach moves to a new segment."""
        self.sink.segment_end(live.stream, live.segments.finish_head())

    def _fail(self, live: _SlotStream, exc: Exception) -> None:
        self._release(live, "error", self.streams.failure(live, exc))

    def _release(self, live: _SlotStream, reason: str, error: EngineError | None = None) -> None:
        if self.streams.release(live, reason, error):
            self._progress = True
            # After its slot is free again: only this thread configures slots and prefills, so no
            # stream takes the slot's rows before this.
            self.stepper.release(live.slot)
