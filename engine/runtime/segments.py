"""A stream's text cut into segments: each segment is one talker sequence.

Text tokens join the open segment as they are committed. A segment is closed (tts_eos appended)
by a flush, by the end of the stream, or by the length policy that bounds the KV cache:
- after `sentence_tokens` text tokens, at the next token that ends a sentence;
- after `max_tokens`, before the next token that starts a word (a hard stop `max_tokens + 32`).
The policy reads token content only, never arrival times, so the cut points (and so the audio)
do not depend on how the text was pushed. A closed segment finishes when the talker emits EOS or
reaches its frame cap; the next segment restarts the talker after the stream's voice prefix.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from voicewire.engine.runtime.text_stream import TextToken

HARD_STOP_SLACK = 32


@dataclass(frozen=True)
class SegmentPolicy:
    sentence_tokens: int | None = 60  # None: never cut at sentence ends
    max_tokens: int | None = 120  # None: no cap (one segment per flush)

    def __post_init__(self) -> None:
        for name in ("sentence_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"segment {name} must be >= 1 or null, got {value}")


@dataclass(frozen=True)
class TrackEntry:
    """What one frame was fed on the text track: a text id, tts_eos or tts_pad, and the text tokens
    that entered the talker with it (the prefill's tokens come with the first frame)."""

    id: int
    tokens: tuple[TextToken, ...]


@dataclass
class Segment:
    """One talker sequence's text: `seq` = reference ids (in-context cloning) + body ids (+ tts_eos)."""

    seq: list[int]
    tokens: list[TextToken | None]  # parallel to seq: the body tokens, None for reference ids and tts_eos
    complete: bool = False
    flushed: bool = False  # closed by a flush: report when its audio is out
    body: int = 0  # body tokens so far
    start: int = -1  # ids of seq held by the prefill; -1 until the prefill ran
    frames: int = 0  # frames generated; frame i is fed seq[start + i], or tts_pad past the end

    def next_id(self, pad_id: int) -> tuple[int, TextToken | None] | None:
        """The text id the next frame is fed, or None while the text track must wait for more."""
        index = self.start + self.frames
        if index < len(self.seq):
            return self.seq[index], self.tokens[index]
        return (pad_id, None) if self.complete else None


@dataclass
class SegmentQueue:
    ref_ids: list[int]
    eos_id: int
    policy: SegmentPolicy
    segments: deque[Segment] = field(default_factory=deque)

    def _open(self) -> Segment:
        if not self.segments or self.segments[-1].complete:
            self.segments.append(Segment(list(self.ref_ids), [None] * len(self.ref_ids)))
        return self.segments[-1]

    def _close(self, segment: Segment, flushed: bool) -> None:
        if segment.body:
            segment.seq.append(self.eos_id)
            segment.tokens.append(None)
        segment.complete = True
        segment.flushed = flushed

    def add(self, token: TextToken) -> None:
        segment = self._open()
        cap = self.policy.max_tokens
        if (
            cap is not None
            and segment.body >= cap
            and (token.text[:1].isspace() or segment.body >= cap + HARD_STOP_SLACK)
        ):
            self._close(segment, flushed=False)
            segment = self._open()
        segment.seq.append(token.id)
        segment.tokens.append(token)
        segment.body += 1
        limit = self.policy.sentence_tokens
        if limit is not None and segment.body >= limit and token.sentence_end:
            self._close(segment, flushed=False)

    def close(self, flushed: bool) -> None:
        """Close the open segment (flush or end). A flush with no new text still leaves a marker."""
        if self.segments and not self.segments[-1].complete:
            self._close(self.segments[-1], flushed)
        elif flushed:
            self.segments.append(Segment([], [], complete=True, flushed=True))

    @property
    def head(self) -> Segment | None:
        return self.segments[0] if self.segments else None

    def finish_head(self) -> bool:
        """The head segment's talker sequence is over (after `segment.frames` frames). Text it did not reach
        moves to a new head segment (a new talker sequence). Returns the `flushed` to report for it:
        False while text of a flush remains, so the flush is reported once its last audio is out."""
        segment = self.segments.popleft()
        index = segment.start + segment.frames
        left = [t for t in segment.tokens[index:] if t is not None]
        if left or not segment.complete:
            rest = Segment(
                [*self.ref_ids, *(t.id for t in left)],
                [*[None] * len(self.ref_ids), *left],
                body=len(left),
            )
            if segment.complete:
                rest.seq.append(self.eos_id)
                rest.tokens.append(None)
                rest.complete, rest.flushed = True, segment.flushed
            if rest.body:
                self.segments.appendleft(rest)
                return False
        return segment.flushed
