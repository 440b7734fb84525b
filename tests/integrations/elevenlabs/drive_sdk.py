"""Drive the official elevenlabs SDK's `text_to_speech.convert_realtime` (stream-input) against a
real `voicewire serve` (run in the LiveKit venv by tests/integrations/test_elevenlabs_clients.py)
and print one JSON line of what it saw.

    drive_sdk.py CONFIG_JSON OUT_FOLDER

CONFIG: "http" and "ws" (the server's base URLs), "key", "voice", and "runs", each {"pieces":
[...], "output_format": name or null (the SDK's default)}. Run N's audio bytes go to OUT/sdk<N>.bin;
the JSON lists per run the URL it opened, every message sent and read (audio as its byte count)
and the close code.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import elevenlabs.realtime_tts as realtime
from elevenlabs.client import ElevenLabs

log: dict[str, Any] = {}


class Recorded:
    """The SDK's socket, noting what goes by."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket

    def __enter__(self) -> Recorded:
        self.socket.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.socket.__exit__(*exc)
        log["close_code"] = self.socket.close_code

    def send(self, data: str) -> None:
        log["sent"].append(json.loads(data))
        self.socket.send(data)

    def recv(self, timeout: float | None = None) -> str:
        data = self.socket.recv(timeout)  # a TimeoutError (the SDK polls) goes by unnoted
        message = json.loads(data)
        if message.get("audio"):
            message["audio"] = len(base64.b64decode(message["audio"]))
        log["received"].append(message)
        return data


def _connect(url: str, connect: Any = realtime.connect, **kwargs: Any) -> Recorded:
    log["url"] = url
    return Recorded(connect(url, **kwargs))


realtime.connect = _connect


def main(config: dict[str, Any], out: Path) -> dict[str, Any]:
    client = ElevenLabs(api_key=config["key"], base_url=config["http"])
    # The SDK makes its socket URL wss:// whatever base_url says; a server behind TLS needs only
    # base_url, this plain-ws one needs the SDK's own attribute for it.
    client.text_to_speech._ws_base_url = config["ws"]
    runs = []
    for number, run in enumerate(config["runs"]):
        log.clear()
        log.update(sent=[], received=[])
        options = {"output_format": run["output_format"]} if run["output_format"] else {}
        audio = client.text_to_speech.convert_realtime(
            config["voice"], text=iter(run["pieces"]), model_id="eleven_flash_v2_5", **options
        )
        (out / f"sdk{number}.bin").write_bytes(b"".join(audio))
        runs.append(dict(log))
    return {"runs": runs}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]), Path(sys.argv[2]))))
