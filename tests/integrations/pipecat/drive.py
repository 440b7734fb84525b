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
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
    TTSTextFrame,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.tts_service import TextAggregationMode
from pipeline import Sink, audio_frames, record_turn, run_pipeline, stopped, until

from voicewire.integrations.pipecat import Sampling, VoicewireTTSService


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
    turns: list[dict[str, Any]] = []
    errors = 0  # errors before the first turn (a refused start) count in it

    async def drive(worker: PipelineWorker, sink: Sink) -> None:
        nonlocal errors
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
                await until(lambda first=first: audio_frames(sink.frames[first:]), "audio")
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
                await until(lambda first=first: stopped(sink, first), "stop")
            frames = sink.frames[first:]
            _, recorded = record_turn(out, number, frames)
            turns.append(
                recorded
                | {
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

    await run_pipeline(tts, config["sample_rate"], drive)
    return {"turns": turns}


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    out = Path(sys.argv[2])
    print(json.dumps(asyncio.run(run(config, out))))
