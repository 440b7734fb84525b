"""Drive Pipecat's own ElevenLabsTTSService (multi-stream-input) in a real Pipecat pipeline against
a real `voicewire serve` (run in the Pipecat venv by tests/integrations/test_elevenlabs_clients.py)
and print one JSON line of what came out of it.

    drive_elevenlabs.py CONFIG_JSON OUT_FOLDER

CONFIG: "url" (the server's ws:// base), "key", "voice", "sample_rate" (the pipeline's output
rate) and "turns", run in order in one pipeline (one service, one socket): a turn is {"pieces":
[...]}, LLM text frames between the response's start and end. With "interrupt": "before_end" an
InterruptionFrame follows the turn's first audio frame while the response is still open (the LLM
is still writing: no end frame); with "after_end" it follows the response's end, as when the
listener talks over a reply that is all written but still playing. An interrupted turn waits for
its context's final message. Turn N's PCM goes to OUT/turn<N>.pcm; the JSON lists per turn its
audio frames' rates and contexts, its word frames (word, pts), the word times the service took
from the alignment (word, seconds from the context's first audio), the errors pushed upstream,
and the socket's traffic in order (sent messages; read ones with audio as its byte count).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSTextFrame,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipeline import Sink, audio_frames, record_turn, run_pipeline, stopped, until

traffic: list[dict[str, Any]] = []  # {"url"/"sent"/"read": ...}


class Socket:
    """The service's websocket, noting what goes by."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.websocket, name)

    async def send(self, message: str) -> None:
        traffic.append({"sent": json.loads(message)})
        await self.websocket.send(message)

    async def __aiter__(self) -> Any:
        async for message in self.websocket:
            data = json.loads(message)
            if data.get("audio"):
                data["audio"] = len(base64.b64decode(data["audio"]))
            traffic.append({"read": data})
            yield message


class Recorded(ElevenLabsTTSService):
    """The service under test, on a socket that notes its traffic, noting the word times it reads."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.word_times: list[list[Any]] = []

    async def _websocket_connect(self, uri: str, **kwargs: Any) -> Any:
        traffic.append({"url": uri})
        return Socket(await super()._websocket_connect(uri, **kwargs))

    async def add_word_timestamps(
        self, word_times: list[tuple[str, float]], context_id: Any = None, **kwargs: Any
    ) -> None:
        self.word_times += [[word, seconds, context_id] for word, seconds in word_times]
        await super().add_word_timestamps(word_times, context_id, **kwargs)


def _final(context_id: str | None) -> bool:
    return any(t.get("read", {}).get("isFinal") and t["read"].get("contextId") == context_id for t in traffic)


async def run(config: dict[str, Any], out: Path) -> dict[str, Any]:
    tts = Recorded(
        api_key=config["key"],
        url=config["url"],
        settings=ElevenLabsTTSService.Settings(voice=config["voice"], model="eleven_flash_v2_5"),
    )
    turns: list[dict[str, Any]] = []

    async def drive(worker: PipelineWorker, sink: Sink) -> None:
        for number, turn in enumerate(config["turns"]):
            first, seen, errors = len(sink.frames), len(traffic), len(sink.errors)
            timed = len(tts.word_times)
            await worker.queue_frame(LLMFullResponseStartFrame())
            for piece in turn["pieces"]:
                await worker.queue_frame(LLMTextFrame(piece))
            if turn.get("interrupt") != "before_end":
                await worker.queue_frame(LLMFullResponseEndFrame())
            if turn.get("interrupt"):
                await until(lambda first=first: audio_frames(sink.frames[first:]), "audio")
                context = audio_frames(sink.frames[first:])[0].context_id
                await worker.queue_frame(InterruptionFrame())
                await until(lambda context=context: _final(context), "final message")
                await asyncio.sleep(1.0)  # for stray audio to show
            else:
                await until(lambda first=first: stopped(sink, first), "stop")
            frames = sink.frames[first:]
            audio, recorded = record_turn(out, number, frames)
            turns.append(
                recorded
                | {
                    "contexts": sorted({f.context_id for f in audio}),
                    "words": [[f.text, f.pts] for f in frames if isinstance(f, TTSTextFrame)],
                    "word_times": tts.word_times[timed:],
                    "errors": sink.errors[errors:],
                    "traffic": traffic[seen:],
                }
            )

    await run_pipeline(tts, config["sample_rate"], drive)
    return {"turns": turns, "urls": [t["url"] for t in traffic if "url" in t]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1]), Path(sys.argv[2])))))
