"""Drive voicewire's LiveKit TTS as LiveKit Agents does (run in the LiveKit venv by
tests/integrations/test_livekit.py) and print one JSON line of what came out of it.

    drive.py CONFIG_JSON OUT_FOLDER

One TTS (the key from $VOICEWIRE_API_KEY, as a deployment sets it) runs, in order:
- "stream": `pieces` pushed one by one into a SynthesizeStream, then end_input; its PCM goes to
  OUT/stream.pcm;
- "interrupt": `interrupt` pushed, the stream closed (aclose, as AgentSession does on barge-in)
  after its first audio frame; the driver then waits for the server's `cancelled`;
- "next": a streamed turn of `short`; "synthesize": synthesize(`short`);
- "refused": a second TTS with a wrong key, streaming `short`;
- "example": examples/livekit_agent.py imported (its AgentServer and entrypoint);
- "restarted": after writing OUT/stopping, the driver waits for OUT/restarted (the test restarts
  the server on the same port meanwhile), then streams `short` again on the first TTS.
Every server message the plugin's sockets read is logged (type, context, samples).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from livekit.agents import APIError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

from voicewire.integrations import livekit
from voicewire.integrations.livekit import TTS, Sampling

TURN_TIMEOUT_S = 120.0
messages: list[dict[str, Any]] = []
sockets_opened = 0


def _record(self: livekit._Socket, message: dict[str, Any], dispatch=livekit._Socket._dispatch) -> None:
    messages.append({k: message.get(k) for k in ("type", "context_id", "code", "samples", "fatal")})
    dispatch(self, message)


async def _open(cls: type, *args: Any, open=livekit._Socket.open) -> livekit._Socket:
    global sockets_opened
    socket = await open(*args)
    sockets_opened += 1
    return socket


livekit._Socket._dispatch = _record  # type: ignore[method-assign]
livekit._Socket.open = classmethod(_open)  # type: ignore[method-assign,assignment]


async def _frames(stream: tts.SynthesizeStream | tts.ChunkedStream) -> dict[str, Any]:
    """Every frame of a stream: its PCM, each frame's size and is_final, and the timed words."""
    pcm, frames, words = bytearray(), [], []
    async for event in stream:  # a turn that never ends is the test's subprocess timeout
        pcm += event.frame.data.tobytes()
        frames.append([event.frame.samples_per_channel, event.is_final, event.frame.sample_rate])
        for word in event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []):
            words.append([str(word), word.start_time, word.end_time])
    return {"pcm": bytes(pcm), "frames": frames, "words": words}


async def _streamed(engine: TTS, pieces: list[str]) -> dict[str, Any]:
    stream = engine.stream()
    for piece in pieces:
        stream.push_text(piece)
    stream.end_input()
    async with stream:
        return await _frames(stream)


async def _interrupted(engine: TTS, text: str) -> dict[str, Any]:
    stream = engine.stream()
    stream.push_text(text)  # no end_input: the LLM is still writing when the user barges in
    first = await asyncio.wait_for(stream.__anext__(), TURN_TIMEOUT_S)
    closed_at = len(messages)  # what the socket read before the stream was closed
    await stream.aclose()
    context = first.segment_id  # the plugin's segment is its protocol context
    deadline = time.monotonic() + 30
    while not any(m["type"] == "cancelled" and m["context_id"] == context for m in messages):
        assert time.monotonic() < deadline, "no cancelled"
        await asyncio.sleep(0.05)
    return {"context_id": context, "first_frame": first.frame.samples_per_channel, "closed_at": closed_at}


async def _refused(config: dict[str, Any]) -> dict[str, Any]:
    engine = TTS(voice=config["voice"], url=config["url"], api_key="not-the-key")
    events: list[Any] = []
    engine.on("error", events.append)
    stream = engine.stream()
    stream.push_text(config["short"])
    stream.end_input()
    started = time.monotonic()
    try:
        async with stream:
            await _frames(stream)
        raised: dict[str, Any] = {}
    except APIError as exc:
        raised = {
            "type": type(exc).__name__,
            "message": exc.message,
            "retryable": exc.retryable,
            "status_code": getattr(exc, "status_code", None),
        }
    await engine.aclose()
    return {
        "raised": raised,
        "seconds": time.monotonic() - started,
        "events": [{"recoverable": e.recoverable, "error": type(e.error).__name__} for e in events],
    }


def _example(path: str) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("livekit_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"server": type(module.server).__name__, "entrypoint": module.entrypoint.__name__}


async def main(config: dict[str, Any], out: Path) -> dict[str, Any]:
    os.environ["VOICEWIRE_API_KEY"] = config["key"]
    engine = TTS(
        voice=config["voice"],
        url=config["url"],
        sample_rate=config["rate"],
        sampling=Sampling(seed=config["seed"]),
    )
    result: dict[str, Any] = {"example": _example(config["example"])}
    stream = await _streamed(engine, config["pieces"])
    (out / "stream.pcm").write_bytes(stream.pop("pcm"))
    result["stream"] = stream
    result["interrupt"] = await _interrupted(engine, config["interrupt"])
    result["next"] = await _streamed(engine, [config["short"]])
    async with engine.synthesize(config["short"]) as chunked:
        result["synthesize"] = await _frames(chunked)
    result["refused"] = await _refused(config)
    result["sockets_before_restart"] = sockets_opened
    (out / "stopping").touch()
    deadline = time.monotonic() + 300
    while not (out / "restarted").exists():
        assert time.monotonic() < deadline, "the server was not restarted"
        await asyncio.sleep(0.1)
    result["restarted"] = await _streamed(engine, [config["short"]])
    result["sockets"] = sockets_opened
    await engine.aclose()
    for turn in ("next", "synthesize", "restarted"):
        result[turn]["samples"] = len(result[turn].pop("pcm")) // 2
    result["messages"] = messages
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1]), Path(sys.argv[2])))))
