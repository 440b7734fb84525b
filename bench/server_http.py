"""What `voicewire bench` reads from the server over HTTP: its first speaker (/v1/voices), and its
/metrics before and after a level, with the sessions each server process opened in between."""

from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def http_url(url: str) -> str:
    """The server's HTTP base URL for its WebSocket URL (ws:// or wss://)."""
    return "http" + url.removeprefix("ws")


def first_speaker(url: str) -> str | None:
    """The server's first named speaker (GET /v1/voices), or None for checkpoints without any."""
    with urllib.request.urlopen(f"{http_url(url)}/v1/voices", timeout=30) as response:
        voices = json.load(response)["voices"]
    return voices[0]["id"] if voices else None


def scrape(url: str) -> str:
    """The server's /metrics exposition now."""
    with urllib.request.urlopen(f"{http_url(url)}/metrics", timeout=30) as response:
        return response.read().decode()


def sessions_by_process(exposition: str) -> dict[str, float]:
    """Sessions each server process has opened so far, by process id (empty for older servers)."""
    for family in text_string_to_metric_families(exposition):
        if family.name == "voicewire_sessions_opened":
            return {s.labels["process"]: s.value for s in family.samples if s.name.endswith("_total")}
    return {}


def process_shares(before: dict[str, float], after: dict[str, float]) -> list[int]:
    """The sessions each server process opened between two `sessions_by_process`, largest first."""
    return sorted(
        (int(n - before.get(p, 0.0)) for p, n in after.items() if n > before.get(p, 0.0)), reverse=True
    )
