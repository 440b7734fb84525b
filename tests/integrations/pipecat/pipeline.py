"""What the Pipecat drivers share (drive.py: voicewire's service; drive_elevenlabs.py: Pipecat's
ElevenLabs service against our ElevenLabs sockets): a pipeline around the service under test that
collects what it sends down and up, run until the driver is done or fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame, TTSTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

TURN_TIMEOUT_S = 120.0


class Sink(FrameProcessor):
    """Collects what the service sends down (audio, words, stops) and up (errors)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.errors: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame | TTSTextFrame | TTSStoppedFrame):
            self.frames.append(frame)
        await self.push_frame(frame, direction)


class Source(FrameProcessor):
    """Sees the errors the service pushes upstream."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.sink.errors.append(frame.error)
        await self.push_frame(frame, direction)


async def until(check: Callable[[], Any], what: str) -> None:
    """Poll: what is awaited shows in the sink or in what the service recorded."""
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {TURN_TIMEOUT_S} s")
        await asyncio.sleep(0.02)


def audio_frames(frames: list[Frame]) -> list[TTSAudioRawFrame]:
    return [f for f in frames if isinstance(f, TTSAudioRawFrame)]


def record_turn(out: Path, number: int, frames: list[Frame]) -> tuple[list[TTSAudioRawFrame], dict[str, Any]]:
    """Writes turn `number`'s audio to OUT/turn<N>.pcm; returns its audio frames and what every
    driver reports of them (their sample rates and count)."""
    audio = audio_frames(frames)
    (out / f"turn{number}.pcm").write_bytes(b"".join(f.audio for f in audio))
    return audio, {"rates": sorted({f.sample_rate for f in audio}), "audio_frames": len(audio)}


def stopped(sink: Sink, first: int) -> bool:
    """Whether a TTSStoppedFrame came since frame `first`: the turn is over."""
    return any(isinstance(f, TTSStoppedFrame) for f in sink.frames[first:])


async def run_pipeline(
    tts: FrameProcessor, sample_rate: int, drive: Callable[[PipelineWorker, Sink], Awaitable[None]]
) -> None:
    """Source -> tts -> sink at `sample_rate`; `drive` queues frames once the pipeline has started,
    then an EndFrame ends it. A driver that fails cancels the pipeline (or it would run on, and
    hang the test)."""
    sink = Sink()
    worker = PipelineWorker(
        Pipeline([Source(sink), tts, sink]),
        params=PipelineParams(audio_out_sample_rate=sample_rate),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: Any, frame: Any) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)

    async def driven() -> None:
        try:
            await asyncio.wait_for(started.wait(), 60)
            await drive(worker, sink)
            await worker.queue_frame(EndFrame())
        except BaseException:
            await runner.cancel("the driver failed")
            raise

    await asyncio.gather(runner.run(), driven())
