"""What every session of a `voicewire bench` level does (`Load`), and what it sends: its `start`
and its text, a word at a time or all at once. No I/O here, and no torch: the client processes
import it."""

from __future__ import annotations

from dataclasses import dataclass

from voicewire.server.protocol import BufferingSpec, FormatSpec

TEXT = (
    "Thanks for calling. I found your order, and it shipped this morning. It should arrive on "
    "Thursday between nine and noon. Is there anything else I can help you with today? "
)
# Text tokens a segment waits for before its first frame: the engine's default (EngineConfig's
# lookahead_tokens, also every configs/*.yaml's). Every session asks for it in `start`, so the
# bench knows which text completes the lookahead whatever the server's own setting.
LOOKAHEAD_TOKENS = 3


def check_chunks(chunks: tuple[int, ...]) -> None:
    """A chunk schedule the protocol's `buffering` accepts: a first chunk and 1-8 more, 1-32 frames each."""
    if len(chunks) >= 2:
        try:
            BufferingSpec(first_chunk_frames=chunks[0], chunk_frames=list(chunks[1:]))
            return
        except ValueError:  # pydantic's ValidationError is one
            pass
    raise ValueError(
        f"chunks needs a first chunk and 1-8 more, each 1-32 frames, not {','.join(map(str, chunks))}"
    )


def check_cancel_every(n: int, name: str = "cancel_every") -> None:
    """A cancel spacing `Load` accepts: 0 (no cancels) or more; `name` is what the caller calls it."""
    if n < 0:
        raise ValueError(f"{name} must be 0 (no cancels) or more, not {n}")


@dataclass(frozen=True)
class Load:
    """What every session of a level does: the server it talks to, its forced frame count, its text
    pace (words/s, 0 = all at once), the speaker, how many sessions each stream runs back to back,
    the chunk schedule it asks for (frames of the first chunk, then of the next ones; None: the
    server's), and which sessions are cancelled after their first 0.4 s of audio: every
    `cancel_every`-th, counting stream by stream (0: none); the text lookahead it asks for; and
    how far apart each stream starts its sessions, `session_interval_s` (0: back to back, each
    on the previous one's `done`, a closed loop; above 0, on a schedule, as callers arrive
    whatever the server's pace: an open loop while every session ends within it); and the Opus
    encoder complexity it asks for (the protocol's default, 5, unless set: the servers' codec
    threads' CPU per packet follows it, scripts/opus_cost.py)."""

    url: str
    frames: int
    rate: float
    speaker: str | None
    sessions_per_stream: int = 1
    chunks: tuple[int, ...] | None = None
    cancel_every: int = 4
    lookahead_tokens: int = LOOKAHEAD_TOKENS
    session_interval_s: float = 0.0
    opus_complexity: int = FormatSpec().complexity

    def __post_init__(self) -> None:
        if not self.session_interval_s >= 0:  # NaN too
            raise ValueError(
                f"session_interval_s must be 0 (back to back) or more, not {self.session_interval_s}"
            )
        if self.lookahead_tokens < 1:
            raise ValueError(f"lookahead_tokens must be at least 1, not {self.lookahead_tokens}")
        if self.sessions_per_stream < 1:
            raise ValueError(f"sessions_per_stream must be at least 1, not {self.sessions_per_stream}")
        check_cancel_every(self.cancel_every)
        if self.chunks is not None:
            check_chunks(self.chunks)
        try:
            FormatSpec(complexity=self.opus_complexity)  # the protocol's bounds, 0-10
        except ValueError:  # pydantic's ValidationError is one
            raise ValueError(f"opus_complexity must be 0-10, not {self.opus_complexity}") from None


def start_message(load: Load, seed: int) -> dict:
    """A session's `start`: Opus at 48 kHz and the load's complexity, the forced frame count, the
    text lookahead, and the chunk schedule if set."""
    buffering: dict[str, object] = {"lookahead_tokens": load.lookahead_tokens}
    if load.chunks is not None:
        buffering |= {"first_chunk_frames": load.chunks[0], "chunk_frames": list(load.chunks[1:])}
    return {
        "type": "start",
        "voice": {"speaker": load.speaker} if load.speaker else {},
        "format": {"encoding": "opus", "sample_rate": 48000, "complexity": load.opus_complexity},
        "sampling": {"seed": seed},
        "max_frames": load.frames,
        "suppress_eos": True,
        "buffering": buffering,
    }


def text_pieces(rate: float) -> list[str]:
    """The text messages of a session: TEXT a word at a time (each with its space), or all at once."""
    if rate <= 0:
        return [TEXT]
    words = TEXT.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]
