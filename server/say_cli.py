"""`voicewire say`: text spoken by a running server, through the Python client (voicewire.client),
to a WAV file or the speakers."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from websockets.exceptions import WebSocketException

from voicewire.client import Client, ServerError, ws_url
from voicewire.server import voices_cli

log = logging.getLogger(__name__)
PLAYERS = ("ffplay", "aplay", "paplay", "afplay")  # the first on the PATH plays


def say(
    text: str,
    url: str,
    *,
    api_key: str | None = None,
    speaker: str | None = None,
    language: str = "auto",
    instruct: str | None = None,
    voice: str | None = None,
    stream_text: bool = False,
    words_per_second: float = 8.0,
    sample_rate: int = 24000,
    out: Path | None = None,
    play: bool = False,
) -> None:
    """Speak `text` with a named speaker, a description (`instruct`) or a stored voice's id
    (`voice`); with none, the checkpoint's first speaker. `stream_text` sends it a word at a time,
    at `words_per_second`. Raises ValueError with one line for the console."""
    if not out and not play:
        raise ValueError("say needs --out FILE.wav or --play")
    if voice and (speaker or instruct):
        raise ValueError("--voice names a whole voice: give it without --speaker or --instruct")
    url = ws_url(url)  # a one-line error for an address that is not one
    if not (speaker or voice or instruct):
        speaker = _first_speaker(url, api_key)
    fields = {"speaker": speaker, "language": language, "id": voice}
    if instruct:
        fields["instruct"] = instruct

    async def speak() -> tuple[np.ndarray, int, dict]:
        client = await Client.connect(
            url,
            api_key=api_key or os.environ.get("VOICEWIRE_API_KEY"),
            voice={k: v for k, v in fields.items() if v is not None},
            format={"encoding": "opus", "sample_rate": sample_rate},
        )
        async with client:
            context = client.context()
            # A word at a time, as an LLM would write it.
            words = text.split(" ")
            pieces = [w + " " for w in words[:-1]] + [words[-1]] if stream_text else [text]

            async def feed() -> None:
                for piece in pieces:
                    await context.push(piece)
                    if stream_text:
                        await asyncio.sleep(1 / words_per_second)
                await context.end()

            audio, _ = await asyncio.gather(context.read_all(), feed())
            return audio, client.sample_rate, context.done or {}

    try:
        audio, rate, done = asyncio.run(speak())
    except ServerError as exc:
        raise ValueError(f"the server refused: {exc}") from None
    except (OSError, WebSocketException) as exc:
        raise ValueError(f"could not reach {url}: {exc}") from None
    log.info("%d samples at %d Hz (%s)", audio.shape[0], rate, done.get("reason", "?"))
    if out:
        sf.write(out, audio, rate, subtype="PCM_16")
        log.info("wrote %s", out)
    if play:
        player = next((p for p in PLAYERS if shutil.which(p)), None)
        if player is None:
            raise ValueError("--play needs ffplay, aplay, paplay or afplay on the PATH")
        with tempfile.NamedTemporaryFile(suffix=".wav") as f:
            sf.write(f.name, audio, rate, subtype="PCM_16")
            extra = ["-autoexit", "-nodisp", "-loglevel", "quiet"] if player == "ffplay" else []
            subprocess.run([player, *extra, f.name], check=True)


def _first_speaker(url: str, api_key: str | None) -> str | None:
    """The checkpoint's first named speaker, for a `say` that names no voice (None when it has
    none: the server then says what the checkpoint needs)."""
    # voices_cli.request reads the two options `voices` shares with `say`.
    listed = voices_cli.request(argparse.Namespace(url=url, api_key=api_key), "GET", "/v1/voices")
    speakers = [voice["id"] for voice in listed.get("voices", [])]
    if not speakers:
        return None
    log.info("speaking as %s, the checkpoint's first speaker (--speaker picks another)", speakers[0])
    return str(speakers[0])
