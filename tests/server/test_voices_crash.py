"""A `voicewire serve` killed with SIGKILL while uploads are under way restarts with a consistent
voice library: every voice listed is whole and speaks, and the database passes its integrity check."""

import base64
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np

from tests.serve import voicewire_serve
from tests.server.test_voices_api import REFERENCE, _reference, _speak_on_socket


def test_sigkill_during_uploads_leaves_a_consistent_library(tiny_checkpoints, tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "serve.log"
    serve = ("--model", str(tiny_checkpoints["base"]), "--data-dir", str(data))
    with voicewire_serve(*serve, log=log) as served:
        process, http = served.process, served.http
        first = httpx.post(
            f"{http}/v1/voices",
            json={"name": "before", "audio": base64.b64encode(REFERENCE).decode()},
            timeout=60,
        )
        assert first.status_code == 201, first.text
        results: list[object] = []

        def upload(i: int) -> None:
            # Upload after upload until the kill ends one: at the kill, each thread is mid-request
            # or about to send one (a fixed number of uploads could all finish before it, as on a
            # quick machine they did).
            for n in range(1000):
                body = {
                    "name": f"u{i}-{n}",
                    "audio": base64.b64encode(_reference(1.0 + i / 5)).decode(),
                    "ref_text": "Hi.",
                }
                try:
                    results.append(httpx.post(f"{http}/v1/voices", json=body, timeout=60).status_code)
                except httpx.HTTPError as exc:
                    results.append(type(exc).__name__)
                    return

        threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        deadline = time.monotonic() + 60
        while sum(r == 201 for r in results) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGKILL)  # the server and its engine process, mid-upload
        process.wait()
        for thread in threads:
            thread.join()
    assert sum(r == 201 for r in results) >= 8, results
    assert any(r != 201 for r in results), results  # the kill cut uploads off
    db = sqlite3.connect(data / "voices.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with voicewire_serve(*serve, log=log) as served:
        http = served.http
        stored = httpx.get(f"{http}/v1/voices", timeout=10).json()["stored"]
        assert first.json()["id"] in {v["id"] for v in stored}
        assert sum(r == 201 for r in results) <= len(stored) - 1  # every acknowledged upload is there
        server = SimpleNamespace(url=http.replace("http://", "ws://"))
        for voice in stored:  # each whole: it loads, fits and speaks (12 frames on the socket)
            assert httpx.get(f"{http}/v1/voices/{voice['id']}", timeout=10).status_code == 200
            spoken = _speak_on_socket(server, {"id": voice["id"]})
            assert isinstance(spoken, np.ndarray) and spoken.size, (voice, spoken)
