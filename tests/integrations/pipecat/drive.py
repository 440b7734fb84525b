"""Drive voicewire's Pipecat service in a real Pipecat pipeline (run in the Pipecat venv by
tests/integrations/test_pipecat.py) and print one JSON line of what came out of it.

    drive.py CONFIG_JSON OUT_FOLDER

CONFIG holds the server, the voice and a list of turns, run one after another in one pipeline (one service, one socket):
- a turn is {"pieces": [...]} (LLM text frames, then the response's end) or {"speak": "..."}
  (a TTSSpeakFrame); with "interrupt_after_audio": true an InterruptionFrame follows the turn's
  first audio frame downstream; with "restart_before": true the driver waits for the file
  OUT/restarted, after writing OUT/stopping, before the turn (the test restarts the server then).
Each turn's PCM is written to OUT/turn<N>.pcm; the JSON lists per turn its audio frames' rates,
its text frames (word, pts), the server messages the service read, and the errors pushed upstream.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TextAggregationMode
from pipecat.workers.runner import WorkerRunner

from voicewire.integrations.pipecat import Sampling, VoicewireTTSService

TURN_TIMEOUT_S = 120.0


class Recorded(VoicewireTTSService):
    """The service under test, noting every server message it reads (type and context)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.messages: list[dict[str, Any]] = []

    async def _on_message(self, message: dict[str, Any]) -> None:
        self.messages.append(
            {k: message.get(k) for k in ("type", "context_id", "code", "samples", "text", "words")}
        )
        await super()._on_message(message)


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


async def until(check: Any, what: str) -> None:
    """Poll: what is awaited shows in the sink or in the service's messages."""
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {TURN_TIMEOUT_S} s")
        await asyncio.sleep(0.02)


async def run(config: dict[str, Any], out: Path) -> dict[str, Any]:
    mode = TextAggregationMode.TOKEN if config.get("tokens") else TextAggregationMode.SENTENCE
    tts = Recorded(
        url=config["url"],
        voice=config["voice"],
        api_key=config.get("api_key"),
        language=config.get("language"),
        sampling=Sampling(seed=config["seed"]) if "seed" in config else None,
        text_aggregation_mode=mode,
    )
    sink = Sink()
    worker = PipelineWorker(
        Pipeline([Source(sink), tts, sink]),
        params=PipelineParams(audio_out_sample_rate=config["sample_rate"]),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: Any, frame: Any) -> None:
        started.set()

    turns: list[dict[str, Any]] = []
    errors = 0  # errors before the first turn (a refused start) count in it

    async def drive() -> None:
        nonlocal errors
        await asyncio.wait_for(started.wait(), 60)
        for number, turn in enumerate(config["turns"]):
            if turn.get("restart_before"):
                (out / "stopping").touch()
                while not (out / "restarted").exists():
                    await asyncio.sleep(0.1)
            first = len(sink.frames)
            seen = len(tts.messages)
            if "speak" in turn:
                await worker.queue_frame(TTSSpeakFrame(turn["speak"]))
            else:
                await worker.queue_frame(LLMFullResponseStartFrame())
                for piece in turn["pieces"]:
                    await worker.queue_frame(LLMTextFrame(piece))
                await worker.queue_frame(LLMFullResponseEndFrame())
            if turn.get("interrupt_after_audio"):
                await until(lambda first=first: _audio(sink.frames[first:]), "audio")
                await worker.queue_frame(InterruptionFrame())
                # The server's answer to the cancel, then a moment for stray audio to show.
                await until(
                    lambda seen=seen: any(m["type"] == "cancelled" for m in tts.messages[seen:]),
                    "cancelled",
                )
                await asyncio.sleep(1.0)
            elif turn.get("expect_error"):
                await until(lambda errors=errors: len(sink.errors) > errors, "error")
            else:
                await until(
                    lambda first=first: any(isinstance(f, TTSStoppedFrame) for f in sink.frames[first:]),
                    "stop",
                )
            frames = sink.frames[first:]
            audio = _audio(frames)
            (out / f"turn{number}.pcm").write_bytes(b"".join(f.audio for f in audio))
            turns.append(
                {
                    "rates": sorted({f.sample_rate for f in audio}),
                    "audio_frames": len(audio),
                    "words": [
                        [f.text, f.pts, f.includes_inter_frame_spaces]
                        for f in frames
                        if isinstance(f, TTSTextFrame)
                    ],
                    "messages": tts.messages[seen:],
                    "errors": sink.errors[errors:],
                    "usable": tts.is_usable,
                }
            )
            errors = len(sink.errors)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)

    async def drive_or_cancel() -> None:
        try:
            await drive()
        except BaseException:
            await runner.cancel("the driver failed")  # or the pipeline would run on, and hang the test
            raise

    await asyncio.gather(runner.run(), drive_or_cancel())
    return {"turns": turns}


def _audio(frames: list[Frame]) -> list[TTSAudioRawFrame]:
    return [f for f in frames if isinstance(f, TTSAudioRawFrame)]


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    out = Path(sys.argv[2])
    print(json.dumps(asyncio.run(run(config, out))))
