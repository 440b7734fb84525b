"""The decoder stage: frames from the scheduler become audio chunks, batched across streams.

It runs in its own thread, fed by a queue, so the talker never waits for it. Each stream owns a
row of one `CodecDecoderState`; the incremental decoder carries its context, so chunks hold
exactly the new samples and equal one full decode. A stream's frames wait until its next chunk
size is reached (small first chunk, larger later), or until a segment end, flush or close drains
them. A round decodes every due chunk in shared passes, one per graphed frame count (8, 4, 2, 1).
With `UrgentChunks`, a round decodes the chunks of listeners short of audio first, and at most so
many of the others; with `join_waiting`, the chunks of listeners waiting now (a new stream's
first, or one run dry) that come due early in it join its next pass; with `shared_passes`, the
urgent chunks and the others share the round's passes. On CUDA the decoder runs above the
talker's stream priority.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from voicewire.engine.config import ChunkSchedule, UrgentChunks
from voicewire.engine.errors import EngineError, StreamFailed
from voicewire.engine.model.codec_decoder import CodecDecoder
from voicewire.engine.runtime.backend import PassFence
from voicewire.engine.runtime.decoder_batch import BatchedDecoder, split_frames
from voicewire.engine.runtime.metrics import EngineMetrics
from voicewire.engine.runtime.playback import SimulatedPlayer
from voicewire.engine.runtime.segments import TrackEntry
from voicewire.engine.runtime.stream import SAMPLE_RATE, SAMPLES_PER_FRAME, AudioChunk, Stream, StreamResult

log = logging.getLogger(__name__)

# CUDA stream priorities (lower goes first when kernels meet): a listener waits for the decoder's
# chunks, so its passes go before the talker's steps.
DECODER_PRIORITY, TALKER_PRIORITY = -2, -1

MAX_DECODE_FRAMES = 32  # a stream that fell behind catches up in chunks of at most this many frames


def join_samples(pieces: list[np.ndarray]) -> np.ndarray:
    """A chunk's decoded pieces (float32, each contiguous) as one new writable array.

    Copied through a bytearray, which holds the GIL: numpy's copies of a chunk's size release it,
    and taking it back waits until a thread running Python lets go, up to the 5 ms switch
    interval. The engine's scheduler, reader and sender threads run Python much of the time, and a
    round delivers up to hundreds of chunks (scripts/bench_gil_copies.py: 1.5 ms a copy beside one
    thread running Python, against 4 us)."""
    return np.frombuffer(bytearray().join(pieces), dtype=np.float32)


@dataclass
class _Frame:
    codes: np.ndarray  # [16] int64
    fed: TrackEntry


@dataclass
class _Mark:
    flushed: bool = False
    close: tuple[str, int, int] | None = None  # (reason, frames, end step)


@dataclass
class _Decoding:
    stream: Stream
    row: int
    chunks: ChunkSchedule
    queue: deque[_Frame | _Mark] = field(default_factory=deque)
    chunk_index: int = 0
    offset: int = 0  # samples delivered
    text_end: int = 0
    closed_at: float | None = None  # time.monotonic() when its close mark came (its last frame)
    # A listener of the chunks as they are delivered: what it has in hand (urgent chunks) and the gaps
    # it would hear (the player_gap metric).
    player: SimulatedPlayer = field(default_factory=SimulatedPlayer)

    def due(self) -> int:
        """Frames to decode now (0: none yet)."""
        frames = 0
        for item in self.queue:
            if isinstance(item, _Mark):
                return frames  # a mark drains what comes before it
            frames += 1
        size = self.chunks.size(self.chunk_index)
        if frames < size:
            return 0
        return min(max(size, frames // size * size), MAX_DECODE_FRAMES)


@dataclass(eq=False)  # identity: chunks are compared by `in`, and their frames hold arrays
class _Chunk:
    """A stream's due frames on their way through a round's decoder passes."""

    decoding: _Decoding
    frames: list[_Frame]
    pieces: list[int]  # frame counts still to decode, ascending; they sum to the frames not yet decoded
    pcm: list[np.ndarray] = field(default_factory=list)  # each decoded piece's samples
    decoded: int = 0  # frames decoded so far

    def next_frames(self, size: int) -> list[_Frame]:
        return self.frames[self.decoded : self.decoded + size]

    def done(self, size: int, samples: np.ndarray) -> None:
        self.pieces.pop(0)
        self.decoded += size
        self.pcm.append(samples)


class DecoderStage:
    def __init__(
        self,
        decoder: CodecDecoder,
        slots: int,
        chunks: ChunkSchedule,
        graphs: bool = False,
        metrics: EngineMetrics | None = None,
        urgent: UrgentChunks | None = None,
        on_stop: Callable[[BaseException], None] | None = None,
    ) -> None:
        """`on_stop(error)`: the decoder's thread ended on `error`, a bug (the engine refuses new
        streams then; its open streams fail after the call)."""
        self.on_stop = on_stop
        self.metrics = metrics or EngineMetrics()
        self.urgent = urgent or UrgentChunks()
        self.batch = BatchedDecoder(decoder, slots, graphs=graphs)
        if graphs:
            self.batch.capture()
        self.device = self.batch.device
        self.chunks = chunks
        self._free = list(range(slots))
        self._streams: dict[int, _Decoding] = {}
        self._fresh: list[int] = []  # rows of newly opened streams, reset together before decoding
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        # Drops read during a round, of its streams: each frees a row that may be in flight.
        self._held: deque[tuple] = deque()
        self._in_round: set[int] = set()  # the streams with a chunk in the round that runs
        self._joined = 0  # chunks that joined it
        self._round_started = 0.0  # time.monotonic() as it began
        self._fences: list[PassFence] = []  # from the talker: open each once its first chunks are queued

    @property
    def open_streams(self) -> int:
        """Streams holding a decoder row (read from other threads for stats only)."""
        return len(self._streams)

    # --- FrameSink, called from the scheduler's thread ------------------------------------------

    def open(self, stream: Stream, warmup: Tensor | None) -> None:
        self._inbox.put(("open", stream, warmup))

    def frames(
        self, streams: list[Stream], codes: np.ndarray, fed: list[TrackEntry], fence: PassFence | None = None
    ) -> None:
        self._inbox.put(("frames", streams, codes, fed, fence))

    def segment_end(self, stream: Stream, flushed: bool) -> None:
        self._inbox.put(("mark", stream, _Mark(flushed=flushed)))

    def drain(self, stream: Stream) -> None:
        self._inbox.put(("mark", stream, _Mark()))

    def close(self, stream: Stream, reason: str, frames: int, end_step: int) -> None:
        self._inbox.put(("mark", stream, _Mark(close=(reason, frames, end_step))))

    def drop(
        self, stream: Stream, reason: str, frames: int, end_step: int, error: EngineError | None
    ) -> None:
        self._inbox.put(("drop", stream, (reason, frames, end_step, error)))

    # --- the decoder's thread -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Decode until `stop` is set. On CUDA it runs on a stream of its own, above the talker's
        priority, so a new stream's chunks are not held behind whole frames."""
        stream = (
            torch.cuda.Stream(self.device, priority=DECODER_PRIORITY) if self.device.type == "cuda" else None
        )
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                while not stop.is_set():
                    try:
                        message = self._inbox.get(timeout=0.05)
                    except queue.Empty:
                        continue
                    with torch.inference_mode():
                        self._apply(message)
                    self.process()
        except BaseException as exc:  # a bug, not a stream's fault; without this thread, no audio
            log.exception("the decoder stopped")
            # The engine refuses new streams before the open ones hear of their failure: a caller
            # that opens another on hearing it must be refused, not left without audio.
            if self.on_stop is not None:
                self.on_stop(exc)
            for decoding in list(self._streams.values()):
                self._fail(decoding, exc)
            self._open_fences(self._fences)

    @torch.inference_mode()
    def process(self) -> None:
        """Decode everything that is due, round by round, applying the queued messages before each:
        frames that came during a round go in the next, before chunks it left for later."""
        while True:
            while self._held:
                self._apply(self._held.popleft())
            while True:
                try:
                    self._apply(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if not self._decode_due():
                # Fences still closed had frames that made no chunk due (their streams failed or
                # went): the talker need not wait for them.
                self._open_fences(self._fences)
                return

    def _apply(self, message: tuple) -> None:
        kind, *args = message
        if kind == "open":
            stream, warmup = args
            row = heapq.heappop(self._free)
            self._streams[stream.id] = _Decoding(stream, row, stream.options.chunks or self.chunks)
            self._fresh.append(row)
            if warmup is not None:
                self._reset_fresh()
                # In-context cloning: the audio continues the reference, so decoding starts from its codes.
                self.batch.decode([row], warmup[None])
        elif kind == "frames":
            streams, codes, fed, fence = args
            if fence is not None:
                self._fences.append(fence)
            for i, (stream, entry) in enumerate(zip(streams, fed, strict=True)):
                decoding = self._streams.get(stream.id)
                if decoding is not None:  # None: it failed here and the scheduler has not seen that yet
                    decoding.queue.append(_Frame(codes[i], entry))
        elif kind == "mark":
            stream, mark = args
            decoding = self._streams.get(stream.id)
            if decoding is not None:
                decoding.queue.append(mark)
                if mark.close is not None:
                    decoding.closed_at = time.monotonic()
        elif kind == "drop":
            stream, (reason, frames, end_step, error) = args
            decoding = self._streams.pop(stream.id, None)
            if stream.result is not None:
                return
            delivered = (
                stream.consumed_samples if reason == "cancelled" else (decoding.offset if decoding else 0)
            )
            if decoding is not None:
                heapq.heappush(self._free, decoding.row)
            stream.finish(
                StreamResult(reason, frames, frames * SAMPLES_PER_FRAME, delivered, end_step, error)
            )

    def _reset_fresh(self) -> None:
        if self._fresh:
            self.batch.reset(self._fresh)
            self._fresh = []

    def _decode_due(self) -> bool:
        """Decode one round of due chunks, then deliver marks; returns whether anything happened."""
        self._reset_fresh()
        now = time.monotonic()
        urgent: list[tuple[float, _Decoding, int]] = []  # (audio in hand, ...)
        # Listeners not short of audio: (talker still running, audio in hand, ...).
        bulk: list[tuple[bool, float, _Decoding, int]] = []
        marked = []
        for decoding in list(self._streams.values()):
            n = decoding.due()
            if n:
                in_hand = decoding.player.buffered_s(now)
                if 0 < self.urgent.in_hand_s <= in_hand:
                    # A stream whose talker has ended goes first among these: its session ends
                    # with its last chunk (and its client waits for that), however much is in hand.
                    bulk.append((decoding.closed_at is None, in_hand, decoding, n))
                else:
                    urgent.append((in_hand, decoding, n))
            elif decoding.queue and isinstance(decoding.queue[0], _Mark):
                marked.append(decoding)
        if 0 < self.urgent.urgent_rows < len(urgent):  # the rest stay due, for the rounds after
            urgent = sorted(urgent, key=lambda item: item[0])[: self.urgent.urgent_rows]
            bulk = []
        bulk_rows = self.urgent.bulk_rows
        if 0 < self.urgent.busy_streams < len(self._streams):
            bulk_rows = self.urgent.busy_bulk_rows
        if 0 < bulk_rows < len(bulk):
            bulk = sorted(bulk, key=lambda item: item[:2])[:bulk_rows]
        # A marked stream too: its mark is delivered after the round, so its drop waits for that.
        self._in_round = {item[-2].stream.id for item in (*urgent, *bulk)} | {d.stream.id for d in marked}
        self._joined, self._round_started = 0, now
        first = [self._take(decoding, n) for _, decoding, n in urgent]
        then = [self._take(decoding, n) for _, _, decoding, n in bulk]
        if self.urgent.shared_passes:
            self._decode(first + then)
        else:
            self._decode(first)
            self._decode(then)
        self._in_round = set()
        if urgent or bulk:
            self.metrics.decode_round.observe(time.monotonic() - now)
            self.metrics.decode_round_chunks.observe(len(urgent) + len(bulk) + self._joined)
            self.metrics.decode_round_urgent.observe(len(urgent))
            self.metrics.decode_round_joined.observe(self._joined)
        for decoding in marked:
            self._deliver_mark(decoding)
        return bool(urgent or bulk or marked)

    @staticmethod
    def _take(decoding: _Decoding, n: int) -> _Chunk:
        frames = [decoding.queue.popleft() for _ in range(n)]
        return _Chunk(decoding, frames, sorted(split_frames(n)))

    def _decode(self, due: list[_Chunk]) -> None:
        """Every due chunk, in shared passes: a pass decodes one frame count, the graphs' (8, 4, 2, 1),
        for every chunk whose next piece has that count. Chunks due at different counts (13 frames
        is 1 + 4 + 8) ride in the same passes, so a round costs one decoder replay per count
        present rather than one per count per chunk size. Smallest pieces first: first chunks and
        drains, which listeners are waiting for, come out in the first pass."""
        while due:
            if self.urgent.join_waiting and time.monotonic() - self._round_started < self.urgent.join_for_s:
                due += self._join_waiting()
            size = min(chunk.pieces[0] for chunk in due)
            riders = [chunk for chunk in due if chunk.pieces[0] == size]
            codes = np.array([[f.codes for f in chunk.next_frames(size)] for chunk in riders], dtype=np.int64)
            fences = self._fences_opened_by(riders) if self._fences else []
            started = time.monotonic()
            try:
                pcm = self.batch.decode(
                    [chunk.decoding.row for chunk in riders],
                    torch.from_numpy(codes),
                    functools.partial(self._open_fences, fences, queued=True) if fences else None,
                ).numpy()
            except Exception as exc:
                log.exception("decoding failed for %d streams", len(riders))
                for chunk in riders:
                    self._fail(chunk.decoding, exc)
                due = [chunk for chunk in due if chunk not in riders]
                continue
            self.metrics.decode.labels(size).observe(time.monotonic() - started)
            self.metrics.decode_streams.labels(size).observe(len(riders))
            for chunk, samples in zip(riders, pcm, strict=True):
                chunk.done(size, samples)
                if not chunk.pieces:
                    self._deliver(chunk)
            due = [chunk for chunk in due if chunk.pieces]

    def _fences_opened_by(self, riders: list[_Chunk]) -> list[PassFence]:
        """The fences of the streams whose first chunk a pass of `riders` completes: they open once
        that pass is queued."""
        firsts = {c.decoding.stream.id for c in riders if c.decoding.chunk_index == 0 and len(c.pieces) == 1}
        return [fence for fence in self._fences if fence.streams & firsts]

    def _open_fences(self, fences: list[PassFence], queued: bool = False) -> None:
        """Open `fences`, with an event after the work queued so far on this thread's CUDA stream
        if `queued` (a pass the talker waits for)."""
        event = None
        if queued and self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        for fence in fences:
            fence.open(event)
        self._fences = [fence for fence in self._fences if fence not in fences]

    def _join_waiting(self) -> list[_Chunk]:
        """Between a round's passes: chunks that came due since it began, of listeners waiting now
        (a new stream's first, or one run dry), to ride in its next pass instead of waiting for its
        end, up to a round's length (session 53: rounds of 83 ms p50 at 256 busy streams, a first
        chunk 70 ms behind its first frame). Only in its first `join_for_s`: each joiner can add
        passes, and the next chunks of the streams in the round wait for its end. Only streams
        whose frames came meanwhile, so those the round's caps left out stay out, and one chunk a
        stream a round: session 32's version,
        which let in every chunk short of `in_hand_s` between passes (no caps then), made first
        chunks later on every figure (docs/log/2026-11.md, "Urgent chunks and the decoder's
        priority"). With `join_final` (`_joins_final`), the last chunk of a stream whose talker
        ended meanwhile joins too, however much its listener has in hand, and where its frames all
        went in earlier rounds its end (the final, empty chunk) goes out at once. The scheduler's
        messages are applied here but the drop of a stream in the round, which frees a row that
        may be in flight: it waits for the round's end."""
        fed: set[int] = set()
        ended: set[int] = set()  # streams whose talker ended meanwhile (with `join_final`)
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                break
            if message[0] == "drop" and message[1].id in self._in_round:
                self._held.append(message)
                continue
            self._apply(message)
            if message[0] == "frames":
                fed.update(stream.id for stream in message[1])
            elif message[0] == "mark" and message[2].close is not None:
                ended.add(message[1].id)
        if not self._joins_final():
            ended.clear()
        self._reset_fresh()
        now = time.monotonic()
        joining = []
        for stream_id in (fed | ended) - self._in_round:
            decoding = self._streams.get(stream_id)
            if decoding is None or (stream_id not in ended and decoding.player.dry_at(now) > now):
                continue
            if stream_id in ended:
                # Its last frames may have gone in an earlier round: its end goes out now.
                self._deliver_marks(decoding)
                if stream_id not in self._streams:
                    continue
            n = decoding.due()
            if n:
                joining.append(self._take(decoding, n))
                self._in_round.add(stream_id)
        self._joined += len(joining)
        return joining

    def _deliver_marks(self, decoding: _Decoding) -> None:
        """The marks at the head of a stream's queue (none of its frames before them), in order,
        until its close takes it away."""
        while decoding.queue and isinstance(decoding.queue[0], _Mark) and decoding.stream.id in self._streams:
            self._deliver_mark(decoding)

    def _joins_final(self) -> bool:
        """Whether ended streams' last chunks join the round in flight: `join_final`, while no more
        streams are open than `busy_streams` (a burst's rounds stay short)."""
        busy = 0 < self.urgent.busy_streams < len(self._streams)
        return self.urgent.join_final and not busy

    def _deliver(self, chunk: _Chunk) -> None:
        decoding, frames = chunk.decoding, chunk.frames
        tokens = [t for f in frames for t in f.fed.tokens]
        decoding.text_end = tokens[-1].end if tokens else decoding.text_end
        mark = decoding.queue[0] if decoding.queue and isinstance(decoding.queue[0], _Mark) else None
        codes = np.array([f.codes for f in frames], dtype=np.int64)
        text_ids = np.array([f.fed.id for f in frames], dtype=np.int64)
        samples = join_samples(chunk.pcm)
        self._emit(decoding, samples, codes, text_ids, "".join(t.text for t in tokens), mark)
        if mark is not None:
            decoding.queue.popleft()
            self._after_mark(decoding, mark)

    def _deliver_mark(self, decoding: _Decoding) -> None:
        mark = decoding.queue.popleft()
        assert isinstance(mark, _Mark)
        if mark.flushed or mark.close is not None:
            empty = np.zeros(0, np.int64)
            self._emit(decoding, np.zeros(0, np.float32), empty.reshape(0, 16), empty, "", mark)
        self._after_mark(decoding, mark)

    def _emit(
        self,
        decoding: _Decoding,
        pcm: np.ndarray,
        codes: np.ndarray,
        text_ids: np.ndarray,
        text: str,
        mark: _Mark | None,
    ) -> None:
        now = time.monotonic()
        chunk = AudioChunk(
            pcm=pcm,
            offset=decoding.offset,
            codes=codes,
            text_ids=text_ids,
            text=text,
            text_end=decoding.text_end,
            flushed=bool(mark and mark.flushed),
            final=bool(mark and mark.close is not None),
            decoded_at=now,
        )
        if pcm.shape[0]:
            first_text = decoding.stream.first_text_at
            if decoding.offset == 0 and first_text is not None:
                self.metrics.first_chunk.observe(now - first_text)
            gap = decoding.player.add(now, pcm.shape[0] / SAMPLE_RATE)
            if gap > 0:
                self.metrics.player_gap.observe(gap)
        decoding.offset += pcm.shape[0]
        decoding.chunk_index += 1
        decoding.stream.deliver(chunk)

    def _after_mark(self, decoding: _Decoding, mark: _Mark) -> None:
        if mark.close is None:
            return
        reason, frames, end_step = mark.close
        if decoding.closed_at is not None:
            self.metrics.final_chunk.observe(time.monotonic() - decoding.closed_at)
        self._streams.pop(decoding.stream.id)
        heapq.heappush(self._free, decoding.row)
        decoding.stream.finish(
            StreamResult(reason, frames, frames * SAMPLES_PER_FRAME, decoding.offset, end_step)
        )

    def _fail(self, decoding: _Decoding, exc: BaseException) -> None:
        self._streams.pop(decoding.stream.id, None)
        heapq.heappush(self._free, decoding.row)
        frames = decoding.offset // SAMPLES_PER_FRAME
        error = StreamFailed(f"decoding failed: {type(exc).__name__}: {exc}")
        decoding.stream.finish(
            StreamResult("error", frames, frames * SAMPLES_PER_FRAME, decoding.offset, 0, error)
        )
        decoding.stream.abort()  # the scheduler releases its slot at its next step
