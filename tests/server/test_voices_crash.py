"""A `voicewire serve` killed with SIGKILL while uploads are under way restarts with a consistent
voice library: every voice listed is whole and speaks, and the database passes its integrity check."""

import base64
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np

from tests.server.test_voices_api import REFERENCE, _reference, _speak_on_socket


@contextlib.contextmanager
def _serve(checkpoint: Path, data: Path, log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "voicewire"), "serve", "--model", str(checkpoint)]
    command += ["--port", str(port), "--data-dir", str(data)]
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    http = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not become ready"
            with contextlib.suppress(OSError, httpx.HTTPError):
                if httpx.get(http + "/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        yield process, http
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_sigkill_during_uploads_leaves_a_consistent_library(tiny_checkpoints, tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "serve.log"
    with _serve(tiny_checkpoints["base"], data, log) as (process, http):
        first = httpx.post(
            f"{http}/v1/voices",
            json={"name": "before", "audio": base64.b64encode(REFERENCE).decode()},
            timeout=60,
        )
        assert first.status_code == 201, first.text
        results: list[object] = []

        def upload(i: int) -> None:
            body = {
                "name": f"u{i}",
                "audio": base64.b64encode(_reference(1.0 + i / 5)).decode(),
                "ref_text": "Hi.",
            }
            try:
                results.append(httpx.post(f"{http}/v1/voices", json=body, timeout=60).status_code)
            except httpx.HTTPError as exc:
                results.append(type(exc).__name__)

        threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # the server and its engine process, mid-upload
        process.wait()
        for thread in threads:
            thread.join()
    assert any(r != 201 for r in results), results  # the kill cut uploads off
    db = sqlite3.connect(data / "voices.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with _serve(tiny_checkpoints["base"], data, log) as (_, http):
        stored = httpx.get(f"{http}/v1/voices", timeout=10).json()["stored"]
        assert first.json()["id"] in {v["id"] for v in stored}
        assert sum(r == 201 for r in results) <= len(stored) - 1  # every acknowledged upload is there
        server = SimpleNamespace(url=http.replace("http://", "ws://"))
        for voice in stored:  # each whole: it loads, fits and speaks (12 frames on the socket)
            assert httpx.get(f"{http}/v1/voices/{voice['id']}", timeout=10).status_code == 200
            spoken = _speak_on_socket(server, {"id": voice["id"]})
            assert isinstance(spoken, np.ndarray) and spoken.size, (voice, spoken)
