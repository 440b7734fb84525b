"""A listener's clock: a player that starts once `start_buffer_s` of audio has arrived, then plays
in real time and waits (a gap) whenever the next audio has not arrived.

The service benchmark runs it over each session's audio as the client receives it, and the
engine over each stream's chunks as they leave the decoder: where the two disagree, the gap was
made in between (IPC, Opus, sockets, the client)."""

from __future__ import annotations

from dataclasses import dataclass, field

START_BUFFER_S = 0.2


@dataclass
class SimulatedPlayer:
    start_buffer_s: float = START_BUFFER_S
    arrived_s: float = 0.0  # audio arrived so far
    ends_at: float | None = None  # when the audio arrived so far will have played; None: not started
    gaps: list[tuple[float, float]] = field(default_factory=list)  # (audio played before it, seconds)

    def add(self, at: float, seconds: float) -> float:
        """`seconds` of audio arrive at time `at`; returns the gap that waited for them (0.0: none)."""
        if self.ends_at is None:
            self.arrived_s += seconds
            if self.arrived_s >= self.start_buffer_s:
                self.ends_at = at + self.arrived_s
            return 0.0
        gap = 0.0
        if at > self.ends_at:  # the buffer ran dry before this audio came: all before it has played
            gap = at - self.ends_at
            self.gaps.append((self.arrived_s, gap))
            self.ends_at = at
        self.ends_at += seconds
        self.arrived_s += seconds
        return gap

    def dry_at(self, now: float) -> float:
        """When the listener next waits for audio: `now` before the player starts (it waits for
        its start buffer), else when the audio arrived so far will have played (past while dry)."""
        return now if self.ends_at is None else self.ends_at

    def buffered_s(self, now: float) -> float:
        """Audio arrived and not played by `now`: all of it before the player starts, and negative
        while it has run dry."""
        return self.arrived_s if self.ends_at is None else self.ends_at - now
