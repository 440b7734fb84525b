"""Drive livekit-plugins-elevenlabs' `TTS.stream()` (multi-stream-input) without a LiveKit room
against a real `voicewire serve` (run in the LiveKit venv by
tests/integrations/test_elevenlabs_clients.py) and print one JSON line of what it saw.

    drive_livekit.py CONFIG_JSON OUT_FOLDER

CONFIG: "url" (the server's http:// base; the plugin's base_url is it and /v1), "key",
"voice", "pieces", "interrupt" and "next". In order, each on its own stream:
- "pcm": `pieces` pushed, then end_input, on a TTS with encoding pcm_<"rate">;
- "mp3": the same on a TTS with the plugin's default encoding (MP3, which the plugin decodes);
- "interrupt": `interrupt` pushed on the PCM TTS, no end_input, the stream closed (aclose, as an
  agent does on barge-in) after its first frame; the driver waits for the context's final message;
- "next": `next` pushed and ended on the same TTS (and socket).
Each stream's PCM goes to OUT/<name>.pcm. The JSON has, per stream, its frames (samples, is_final,
rate, segment) and timed words (text, start, end), and every socket's traffic in order (sent
messages; read ones with audio as its byte count).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from livekit.agents import tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import elevenlabs
from livekit.plugins.elevenlabs import tts as plugin

TIMEOUT_S = 120.0
traffic: list[dict[str, Any]] = []  # {"socket": n, "url"/"sent"/"read": ...}


class Recorded:
    """The plugin's aiohttp socket, noting what goes by."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, number: int) -> None:
        self.ws, self.number = ws, number

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ws, name)

    async def send_json(self, data: dict[str, Any]) -> None:
        traffic.append({"socket": self.number, "sent": data})
        await self.ws.send_json(data)

    async def receive(self) -> aiohttp.WSMessage:
        message = await self.ws.receive()
        if message.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(message.data)
            if data.get("audio"):
                data["audio"] = len(base64.b64decode(data["audio"]))
            traffic.append({"socket": self.number, "read": data})
        else:
            traffic.append({"socket": self.number, "closed": self.ws.close_code})
        return message


async def _connect(self: plugin._Connection, connect: Any = plugin._Connection.connect) -> None:
    fresh = self._ws is None
    await connect(self)
    if fresh and self._ws is not None:  # before its loops first run: they read self._ws
        number = sum(1 for t in traffic if "url" in t)
        traffic.append({"socket": number, "url": self._connect_url()})
        self._ws = Recorded(self._ws, number)  # type: ignore[assignment]


plugin._Connection.connect = _connect  # type: ignore[method-assign]


async def _frames(stream: tts.SynthesizeStream, out: Path, name: str) -> dict[str, Any]:
    pcm, frames, words = bytearray(), [], []
    async for event in stream:
        pcm += event.frame.data.tobytes()
        frames.append(
            [event.frame.samples_per_channel, event.is_final, event.frame.sample_rate, event.segment_id]
        )
        for word in event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []):
            words.append([str(word), word.start_time, word.end_time])
    (out / f"{name}.pcm").write_bytes(bytes(pcm))
    return {"frames": frames, "words": words}


async def _streamed(engine: elevenlabs.TTS, pieces: list[str], out: Path, name: str) -> dict[str, Any]:
    stream = engine.stream()
    for piece in pieces:
        stream.push_text(piece)
    stream.end_input()
    async with stream:
        return await asyncio.wait_for(_frames(stream, out, name), TIMEOUT_S)


async def _interrupted(engine: elevenlabs.TTS, text: str) -> dict[str, Any]:
    stream = engine.stream()
    stream.push_text(text)  # no end_input: the LLM is still writing when the user barges in
    first = await asyncio.wait_for(stream.__anext__(), TIMEOUT_S)
    await stream.aclose()
    context = first.segment_id  # the plugin's context id
    deadline = time.monotonic() + 30
    while not any(
        t.get("read", {}).get("isFinal") and t["read"].get("contextId") == context for t in traffic
    ):
        assert time.monotonic() < deadline, "no final message for the closed context"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # for stray audio to show
    return {"context_id": context, "first_frame": first.frame.samples_per_channel}


async def main(config: dict[str, Any], out: Path) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        options = {
            "api_key": config["key"],
            "base_url": f"{config['url']}/v1",
            "voice_id": config["voice"],
            "model": "eleven_flash_v2_5",
            "http_session": session,
        }
        pcm = elevenlabs.TTS(**options, encoding=f"pcm_{config['rate']}")
        mp3 = elevenlabs.TTS(**options)  # its default encoding, mp3_22050_32
        result = {
            "pcm": await _streamed(pcm, config["pieces"], out, "pcm"),
            "mp3": await _streamed(mp3, config["pieces"], out, "mp3"),
            "interrupt": await _interrupted(pcm, config["interrupt"]),
            "next": await _streamed(pcm, [config["next"]], out, "next"),
        }
        await pcm.aclose()
        await mp3.aclose()
    result["traffic"] = traffic
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1]), Path(sys.argv[2])))))
