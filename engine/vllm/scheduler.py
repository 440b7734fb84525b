"""The vllm backend's front end: streams become vLLM streaming-input requests, frames come back.

It plays the torch `Scheduler`'s part behind the same `Engine` API, in a thread of its own that
runs vLLM's `AsyncLLM` in an asyncio loop. The stream side is the same, and shared: streams are
admitted, drained and released by the `LiveStreams` table (`live_streams.py`), text is committed into
segments (`segments.py`), and each segment is one talker sequence, here one vLLM request:
- the request's first chunk is the prompt (voice prefix + segment rows) and the text track known
  so far; text that arrives later goes in as further chunks, one placeholder token each, with
  `max_tokens` equal to the new text ids;
- when a chunk's frames are drawn and no chunk is queued, vLLM keeps the request waiting with its
  KV blocks; a stream that waits longer than `vllm.waiting_timeout_s` is ended with an error;
- once the text is complete (tts_eos), the last chunk lets it run to EOS or the frame cap.
The worker draws a frame one step before the torch backend would (its text id is fed at the next
chunk), so each frame is held until its text id is known, then handed to the decoder stage with
the same `TrackEntry` the torch backend gives it. Frames come back as pooler outputs, collected
without merging (`FrameCollector`), and are checked to arrive in order, every one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.engine.protocol import StreamingInput
from vllm.inputs import TokensPrompt
from vllm.outputs import PoolingRequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.output_processor import RequestOutputCollector

from voicewire.engine.config import EngineConfig, GenerationOptions
from voicewire.engine.errors import EngineError, StreamFailed
from voicewire.engine.model.prompt import segment_can_start, segment_rows
from voicewire.engine.model.qwen3_tts import ModelParts
from voicewire.engine.runtime.backend import FrameSink
from voicewire.engine.runtime.frame_step import MIN_FRAMES
from voicewire.engine.runtime.live_streams import LiveStream, LiveStreams
from voicewire.engine.runtime.segments import Segment, TrackEntry
from voicewire.engine.runtime.stream import Stream
from voicewire.engine.vllm import launch, register
from voicewire.engine.vllm.sequence import EOS, FRAME, SequenceSpec, TrackChunk

log = logging.getLogger(__name__)

PLACEHOLDER = 0  # the token id of every prompt position; the worker builds the real rows
IDLE_WAIT_S = 0.05


class FrameCollector(RequestOutputCollector):
    """A request's outputs, every one in order. vLLM's collector keeps only the latest pooling
    output when its reader lags, which would drop frames."""

    rows: deque[torch.Tensor]
    error: BaseException | None
    on_output: Callable[[], None]

    @classmethod
    def adopt(cls, collector: RequestOutputCollector, on_output: Callable[[], None]) -> FrameCollector:
        collector.__class__ = cls
        assert isinstance(collector, FrameCollector)
        collector.rows, collector.error, collector.on_output = deque(), None, on_output
        return collector

    def put(self, output: object) -> None:
        if isinstance(output, BaseException):
            self.error = output
        elif isinstance(output, PoolingRequestOutput):
            self.rows.append(output.outputs.data)
        self.on_output()


@dataclass(eq=False)
class _Request:
    """The vLLM request of a running talker sequence."""

    id: str
    segment: Segment
    chunks: asyncio.Queue[StreamingInput | None]
    collector: FrameCollector
    frame_cap: int  # frames the sequence may reach (KV bound)
    sent: int  # text-track ids sent (seq[segment.start:])
    complete: bool  # the track sent is complete
    planned: int  # frames asked for
    chunk_count: int = 1
    drawn: int = 0  # frames received
    held: deque[list[int]] = field(default_factory=deque)  # drawn, waiting for their text id
    eos: bool = False


@dataclass(eq=False)
class _RequestStream(LiveStream):
    """A live stream with its running talker sequence's vLLM request, if any."""

    rounds: int = 0  # noise rounds used by finished sequences (the torch backend's count)
    request: _Request | None = None


class VllmScheduler:
    """Runs the talker on vLLM for every stream; owns the thread and loop vLLM's front end lives in."""

    def __init__(
        self,
        parts: ModelParts,
        model_dir: Path,
        config: EngineConfig,
        sink: FrameSink,
        max_ahead_samples: int | None,
    ) -> None:
        register()
        self.parts = parts
        self.config = config
        self.sink = sink
        self.max_ahead_samples = max_ahead_samples
        self._args = launch.engine_args(model_dir, config)
        self.streams = LiveStreams(_RequestStream, parts, sink, config.max_streams, config.segments)
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._wake: asyncio.Event | None = None
        self._ready = threading.Event()
        self._llm: AsyncLLM | None = None

    # --- any thread ----------------------------------------------------------------------------

    def submit(self, stream: Stream, options: GenerationOptions, lookahead: int) -> None:
        self.streams.submit(stream, options, lookahead)
        self.wake()

    def wake(self) -> None:
        if self._wake is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def wait_ready(self, timeout: float) -> None:
        """Block until vLLM has started (or raise why it did not)."""
        if not self._ready.wait(timeout):
            raise RuntimeError(f"vLLM did not start within {timeout:.0f} s")
        error = self.streams.error
        if error is not None:
            raise RuntimeError(f"vLLM failed to start: {error}") from error

    @property
    def requests_in_flight(self) -> int:
        """vLLM requests not yet finished or aborted (each holds KV while it runs or waits)."""
        llm = self._llm
        return 0 if llm is None else llm.get_num_unfinished_requests()

    # --- the vLLM thread -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(stop))
        except BaseException as exc:
            log.exception("the vLLM talker stopped")
            self.streams.stopped(exc)
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self, stop: threading.Event) -> None:
        self._wake = asyncio.Event()
        self._llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**self._args))
        self._ready.set()
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(self._wake.wait(), IDLE_WAIT_S)
                except TimeoutError:
                    pass
                self._wake.clear()
                await self._round()
        finally:
            for live in list(self.streams.live):
                await self._release(live, "error", StreamFailed("the engine was closed"))
            self._llm.shutdown()
            self._llm = None

    async def _round(self) -> None:
        for live in self.streams.take_incoming():
            self.streams.admit(live)
        for live in list(self.streams.live):
            try:
                await self._service(live)
            except Exception as exc:
                await self._fail(live, exc)

    async def _service(self, live: _RequestStream) -> None:
        if self.streams.drain(live):
            await self._release(live, "cancelled")
            return
        if live.request is not None:
            await self._take_frames(live, live.request)
        while not live.released and live.request is None:
            if not await self._start(live):
                break
        request = live.request
        if request is None or live.released:
            return
        self._send_text(request)
        if request.segment.next_id(self.parts.text_ids.tts_pad) is None:  # waiting for text
            if not live.starved:
                live.starved = True
                self.sink.drain(live.stream)
            waited = time.monotonic() - live.last_text
            timeout = self.config.vllm.waiting_timeout_s
            if waited > timeout:
                await self._fail(
                    live,
                    StreamFailed(
                        f"no text for {waited:.0f} s while the stream held its place in the talker "
                        f"(vllm.waiting_timeout_s is {timeout:g}); it was ended to free its KV cache. "
                        "Send end or flush when the text is complete."
                    ),
                )

    async def _take_frames(self, live: _RequestStream, request: _Request) -> None:
        """Frames drawn by the worker -> the decoder stage, each once its text id is known."""
        if request.collector.error is not None:
            raise request.collector.error
        pad = self.parts.text_ids.tts_pad
        while request.collector.rows and not request.eos:
            index, kind, *codes = request.collector.rows.popleft().tolist()
            if index != request.drawn:
                raise StreamFailed(f"frame {index} arrived where frame {request.drawn} was due")
            if kind == FRAME:
                request.held.append(codes)
                request.drawn += 1
            elif kind == EOS:
                request.eos = True
            else:
                raise StreamFailed("the talker produced non-finite values for this stream")
        segment = request.segment
        while request.held:
            next_id = segment.next_id(pad)
            if next_id is None:
                return  # its text id has not arrived
            codes = request.held.popleft()
            tokens = (*live.prefilled, *([next_id[1]] if next_id[1] is not None else []))
            live.prefilled = []
            live.starved = False
            self.sink.frames(
                [live.stream], np.array([codes], dtype=np.int64), [TrackEntry(next_id[0], tokens)]
            )
            segment.frames += 1
            live.frames += 1
            max_frames = live.max_frames
            if max_frames is not None and live.frames >= max_frames:
                await self._release(live, "max_frames")
                return
            guarded = max_frames is None and not live.options.suppress_eos
            guard = self.config.speech_guard.frames(segment) if guarded else None
            if guard is not None and segment.frames >= guard:
                log.info(
                    "stream %d: no end of speech %d frames into a sequence; ended",
                    live.stream.id,
                    segment.frames,
                )
                live.cut = True
                await self._end_sequence(live)
                return
            if segment.frames >= request.frame_cap:
                live.cut = False
                if not live.options.suppress_eos:
                    log.warning(
                        "stream %d: a segment reached the KV bound (%d frames)",
                        live.stream.id,
                        segment.frames,
                    )
                await self._end_sequence(live)
                return
        if request.eos:
            live.cut = False
            await self._end_sequence(live)

    async def _end_sequence(self, live: _RequestStream) -> None:
        request = live.request
        assert request is not None
        live.request = None
        live.rounds += request.segment.frames + 1  # every frame, and the draw that ended it
        await self._stop(request)
        self.sink.segment_end(live.stream, live.segments.finish_head())

    async def _start(self, live: _RequestStream) -> bool:
        """Start the stream's next talker sequence if its text allows; False when it must wait."""
        voice = live.voice
        assert voice is not None
        segment = live.segments.head
        if segment is None:
            if live.ended:
                await self._release(live, "length" if live.cut else "end")
            return False
        if segment.complete and segment.body == 0:  # a flush with nothing new to say
            live.segments.segments.popleft()
            self.sink.segment_end(live.stream, segment.flushed)
            return True
        layout = live.stream.options.layout
        if not segment_can_start(voice, len(segment.seq), segment.complete, layout):
            return False
        if not segment.complete and segment.body < live.lookahead:
            return False
        if self.max_ahead_samples is not None and live.stream.unread_samples >= self.max_ahead_samples:
            return False
        rows, held = segment_rows(voice, segment.seq, layout)
        rows = voice.prefix + rows
        frame_cap = self.config.kv_length - len(rows)
        if frame_cap < MIN_FRAMES:
            raise StreamFailed(
                f"the prompt needs {len(rows)} positions; kv_length {self.config.kv_length} leaves no room to speak"
            )
        track = segment.seq[held:]
        planned = frame_cap if segment.complete else min(len(track) + 1, frame_cap)
        spec = SequenceSpec.build(
            rows,
            track,
            segment.complete,
            self.parts.text_ids.tts_pad,
            live.options,
            live.seed,
            live.rounds,
            voice.xvector,
            voice.ref_codes,
        )
        chunks: asyncio.Queue[StreamingInput | None] = asyncio.Queue()
        chunks.put_nowait(
            StreamingInput(
                TokensPrompt(prompt_token_ids=[PLACEHOLDER] * len(rows)),
                self._params(planned, spec.to_extra()),
            )
        )
        request_id = f"vw-{live.stream.id}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        assert self._llm is not None
        # The request-level params only pass vLLM's checks: every chunk brings its own.
        collector = await self._llm.add_request(request_id, _chunks(chunks), self._params(1, {}))
        live.request = _Request(
            request_id,
            segment,
            chunks,
            FrameCollector.adopt(collector, self.wake),
            frame_cap,
            sent=len(track),
            complete=segment.complete,
            planned=planned,
        )
        segment.start = held
        live.prefilled = [t for t in segment.tokens[:held] if t is not None]
        return True

    def _send_text(self, request: _Request) -> None:
        """Text ids that arrived since the last chunk go in as the next chunk."""
        segment = request.segment
        new = segment.seq[segment.start + request.sent :]
        if request.complete or (not new and not segment.complete):
            return
        room = request.frame_cap - request.planned
        if room <= 0:
            return  # the sequence ends at its frame cap; the rest of the text starts a new one
        count = room if segment.complete else min(len(new), room)
        chunk = TrackChunk(request.chunk_count, list(new), segment.complete)
        request.chunks.put_nowait(
            StreamingInput(
                TokensPrompt(prompt_token_ids=[PLACEHOLDER]), self._params(count, chunk.to_extra())
            )
        )
        request.chunk_count += 1
        request.sent += len(new)
        request.complete = segment.complete
        request.planned += count

    def _params(self, max_tokens: int, extra: dict) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens,
            stop_token_ids=[self.parts.talker.cfg.codec_eos_id],
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
            extra_args=extra,
        )

    async def _stop(self, request: _Request) -> None:
        """End a request: no more chunks (without vLLM's closing request), free its KV."""
        request.collector.close()  # cancels the chunk feeder; a cancelled feeder sends nothing more
        assert self._llm is not None
        await self._llm.abort(request.id)

    async def _fail(self, live: _RequestStream, exc: BaseException) -> None:
        await self._release(live, "error", self.streams.failure(live, exc))

    async def _release(self, live: _RequestStream, reason: str, error: EngineError | None = None) -> None:
        # A released stream holds no request; nothing else runs on this loop's streams meanwhile.
        if live.request is not None:
            request, live.request = live.request, None
            await self._stop(request)
        self.streams.release(live, reason, error)


async def _chunks(queue: asyncio.Queue[StreamingInput | None]) -> AsyncGenerator[StreamingInput, None]:
    while (item := await queue.get()) is not None:
        yield item
