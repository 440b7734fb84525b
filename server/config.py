"""Server settings: the `server:` section of a profile in configs/, with CLI overrides."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # every server process logs alike


# 0: a dead engine process stops the server; no waiting for a stream slot (engine_full at once).
ZERO_ALLOWED = {
    "engine_restarts",
    "slot_wait_s",
    "slot_queue",
    "word_lag_frames",
    "codec_horizon_s",
    "codec_nice",
}
# Settings an environment variable overrides over the profile (a flag overrides both).
ENV = {"data_dir": "VOICEWIRE_DATA_DIR"}


def user_data_dir() -> Path:
    """Where `server.data_dir` is when nothing sets it: $XDG_DATA_HOME/voicewire, else
    ~/.local/share/voicewire."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "voicewire"


@dataclass(frozen=True)
class VoiceLimits:
    """`server.voices`: what the voice library accepts (docs/protocol.md, "Voice library")."""

    max_upload_bytes: int = 20_000_000  # the reference file as uploaded
    min_seconds: float = 1.0
    max_seconds: float = 60.0
    max_ref_text_chars: int = 1000
    max_voices_per_key: int = 100  # with no keys: in all

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"server setting voices.{f.name} must be > 0, got {getattr(self, f.name)!r}")
        if self.min_seconds > self.max_seconds:
            raise ValueError("server setting voices.min_seconds is over voices.max_seconds")

    @classmethod
    def from_dict(cls, data: Any) -> VoiceLimits:
        # engine.config's typed_settings imported when called, not with this module: importing the
        # engine package here (the CLI imports this module first) would import prometheus-client
        # before `serve` names its multiprocess folder, and a one-process server's own metrics
        # would leave /metrics (server.metrics_dir).
        from voicewire.engine.config import typed_settings

        if not isinstance(data, dict):
            raise ValueError("server setting voices must be a mapping")
        return cls(**typed_settings(cls, data, "server.voices", "server setting voices."))


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_contexts: int = 4  # concurrent contexts per socket
    max_message_bytes: int = 65536  # one client frame
    max_text_chars: int = 4096  # one text message
    max_context_chars: int = 200_000  # all text of one context
    send_queue: int = 4096  # messages waiting for a socket; past it the client is cut off
    send_buffer_s: float = 20.0  # seconds of audio waiting for a socket; past it, likewise
    idle_timeout_s: float = 300.0  # no message and no open context for this long: close
    api_keys: tuple[str, ...] = ()  # also VOICEWIRE_API_KEYS; none: open, and loopback only
    token_secret: str | None = None  # signs browser tokens; None: random per process
    token_ttl_s: float = 300.0
    allowed_origins: tuple[str, ...] = ()  # browser origins allowed; empty: any
    max_sessions: int = 256  # sockets open at once, all keys together (per worker)
    max_sessions_per_key: int = 16  # per worker
    # Processes serving sockets and encoding audio, all on one engine process. Above 1, the
    # session limits above hold per worker, and token_secret is shared (made up if unset).
    workers: int = 1
    # Threads per worker encoding audio (Opus, resampling) off its event loop. None: the CPUs
    # shared among the workers. More threads than that only fight the event loop for the GIL.
    codec_threads: int | None = None
    # How far ahead the codec threads look (session.Context.due): a chunk is due when its listener
    # would run out of audio, or this many seconds from now if that is later, and the threads take
    # the earliest due first; 0 takes chunks in the order they came. On an H200 at 256 busy streams,
    # 1 s left no session a gap and first audio p95 at 200 ms, against 15-18 gapped sessions and
    # 360-415 ms in the order they came; but the chunks a listener did not need yet waited, so its
    # `done` came later (speed p50 / p5 3.9x / 2.1x against 4.7x / 3.7-3.9x) and the bench's
    # streams, each starting its next session on `done`, made 830.7 audio-s/s against 1,123-1,157.
    # 0.1 s left 115 sessions gapped (docs/log/2026-11.md, session 54).
    codec_horizon_s: float = 1.0
    # How much nicer (0-19, Linux) the codec threads run than the rest of their process, so that
    # on a host whose CPUs are all busy the engine process's threads and the workers' event loops
    # (first packets, text to the engine) go first. On an H200's 16 CPUs eight workers at nice 10
    # still left the engine stepping half as often as five at 0 (docs/log/2026-11.md, session 62),
    # so the GPU profile keeps 0.
    codec_nice: int = 0
    # An engine process that dies is started again (its open contexts get stream_failed and
    # /ready answers 503 until the new one is warm), unless it died more than this many times
    # within engine_restart_window_s: then the server exits non-zero, for its supervisor.
    engine_restarts: int = 3
    engine_restart_window_s: float = 300.0
    # A context (or speech request) that finds every engine slot taken waits up to slot_wait_s
    # for one, first come first served, behind at most slot_queue others (per worker); past
    # either it gets engine_full (HTTP 503 with Retry-After). Long enough to ride out a burst
    # of turns starting together, short enough that a client can go elsewhere. 0: no waiting.
    slot_wait_s: float = 2.0
    slot_queue: int = 128
    # Word timing (docs/protocol.md): a word starts this many 80 ms frames after the frame its first
    # text token entered the talker. The talker speaks a token no earlier than the frame it is fed
    # (the codec decoder is causal, with no lookahead), and its text track runs ahead of the voice:
    # a segment starts with lookahead_tokens (default 3) tokens already in, all fed with its first
    # frame, which sounds within a frame or two. 2 frames (160 ms) splits that; not measured on
    # trained weights (the tiny checkpoint makes noise), so it is a setting.
    word_lag_frames: int = 2
    # The voice library's folder (its SQLite file). None: user_data_dir(). A string, not a Path,
    # so that the settings go to the workers as JSON (serving.py).
    data_dir: str | None = None
    voices: VoiceLimits = VoiceLimits()

    @property
    def codec_thread_count(self) -> int:
        return self.codec_threads or max(1, (os.cpu_count() or 2) // self.workers)

    @property
    def voice_folder(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else user_data_dir()

    def __post_init__(self) -> None:
        if not isinstance(self.voices, VoiceLimits):
            raise ValueError("server setting voices must be VoiceLimits")
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if f.name in ZERO_ALLOWED and value < 0:
                raise ValueError(f"server setting {f.name} must be >= 0, got {value}")
            if f.name not in ZERO_ALLOWED and value <= 0:
                raise ValueError(f"server setting {f.name} must be > 0, got {value}")
        if self.codec_nice > 19:
            raise ValueError(f"server setting codec_nice must be 0-19, got {self.codec_nice}")

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides: Any) -> ServerConfig:
        """The profile's `server:` section, under the environment (ENV), under `overrides` (flags;
        None: not given)."""
        data: dict[str, Any] = {}
        if path is not None:
            with open(path, encoding="utf-8") as f:
                profile = yaml.safe_load(f) or {}
            data = dict(profile.get("server", {}) or {})
        data.update({name: os.environ[var] for name, var in ENV.items() if os.environ.get(var)})
        data.update({k: v for k, v in overrides.items() if v is not None})
        for name in ("api_keys", "allowed_origins"):
            if name in data:
                if not isinstance(data[name], list | tuple) or not all(
                    isinstance(v, str) for v in data[name]
                ):
                    raise ValueError(f"server setting {name} must be a list of strings")
                data[name] = tuple(data[name])
        if "voices" in data:
            data["voices"] = VoiceLimits.from_dict(data["voices"] or {})
        if data.get("data_dir") is not None:
            data["data_dir"] = str(data["data_dir"])
        from voicewire.engine.config import typed_settings  # when called: see VoiceLimits.from_dict

        return cls(**typed_settings(cls, data, "server", "server setting "))


# The most a client frame may be before the WebSocket layer stops reading it and closes the socket
# (1009, after a fatal message_too_large). Up to it, a frame is read whole, held in memory, and answered
# with a non-fatal message_too_large when it is over max_message_bytes: this bounds a socket's memory.
WS_MAX_FRAME = 16 * 2**20


def ws_max_size(config: ServerConfig) -> int:
    """The largest client frame a socket reads (see WS_MAX_FRAME)."""
    return max(WS_MAX_FRAME, 64 * config.max_message_bytes)


def uvicorn_options(config: ServerConfig) -> dict[str, Any]:
    """uvicorn settings every way of serving the app shares. permessage-deflate is off: the audio
    is already compressed, and deflating every Opus packet took a third of the event loop at 256
    streams. Frames far larger than a message are still read (the session answers them, and the
    socket goes on); past ws_max_size the WebSocket layer (server.wire.WireProtocol) says why, then
    closes."""
    from voicewire.server.wire import WireProtocol  # it imports uvicorn; the settings need not

    return {"ws": WireProtocol, "ws_per_message_deflate": False, "ws_max_size": ws_max_size(config)}
