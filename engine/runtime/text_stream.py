"""Incremental tokenization: text arrives in pieces, token ids leave as soon as they are final.

Byte-level BPE runs per pre-token (the split regex), and the last pre-token of a partial text
may still grow ("wor" -> "world", "it'" -> "it's", "  " -> " " + " x"). So the tail after the
last *safe boundary* is held back until more text, a flush or the end. A boundary at index b
is safe when no pattern of the split regex (either variant) can match across it and nothing
before it looks past it:
- text[b] is a space or tab after a non-space (letters, numbers and punctuation runs all stop
  at a space; newlines are not used, since a punctuation run absorbs them);
- text[b-1] is a number (numbers are always single pre-tokens);
- text[b-1] is a letter and text[b] is punctuation or a symbol (a letter run stops there), which
  gives boundaries in text without spaces, such as Chinese.
Pushing a text in any pieces therefore yields exactly the ids of encoding it at once.

The tokens of one stream cover its text without gap or overlap, so `PackedTokens` can carry a
batch of them across a pipe as plain lists and one string.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

from voicewire.engine.model.text_tokenizer import TextTokenizer

SENTENCE_END = frozenset(".!?。！？…")
CLOSERS = frozenset("\"')]}»”’」』）")


@dataclass(frozen=True)
class TextToken:
    """One committed text token and the span of the stream's text it came from."""

    id: int
    text: str  # the characters it covers ("" when it shares a character with the next token)
    end: int  # offset just past it, in characters of all text pushed to the stream
    sentence_end: bool


class PackedTokens(NamedTuple):
    """Committed tokens in plain lists, to cross a pipe (engine/runtime/engine_process.py). The 14
    tokens of 60 characters of prose (the real-size checkpoints' tokenizer) pickle as `TextToken`s
    to 459 bytes in 17 us and load in 13 us; as these lists, 184 bytes, 3.3 us and 2.4 us (the
    60 characters alone: 80 bytes, 1.0 us and 0.6 us). `unpack` then takes 17 us, against 86 us to
    tokenize the text (timeit, one core of a busy 2-core host)."""

    ids: list[int]
    ends: list[int]
    text: str  # the tokens' texts joined: each one's is the span from the previous token's end
    sentence_ends: list[bool]

    @classmethod
    def of(cls, tokens: list[TextToken]) -> PackedTokens:
        """`tokens` as `IncrementalTokenizer` commits them: each one's text just before its end."""
        return cls(
            [t.id for t in tokens],
            [t.end for t in tokens],
            "".join(t.text for t in tokens),
            [t.sentence_end for t in tokens],
        )

    def unpack(self) -> list[TextToken]:
        if not self.ids:
            return []
        start = done = self.ends[-1] - len(self.text)  # offset of the first token's text
        tokens = []
        for token_id, end, sentence_end in zip(self.ids, self.ends, self.sentence_ends, strict=True):
            tokens.append(TextToken(token_id, self.text[done - start : end - start], end, sentence_end))
            done = end
        return tokens


def _safe_boundary(text: str, b: int) -> bool:
    prev, cur = text[b - 1], text[b]
    if cur in " \t" and not prev.isspace():
        return True
    prev_cat, cur_cat = unicodedata.category(prev), unicodedata.category(cur)
    if prev_cat[0] == "N":
        return True
    return prev.isalpha() and cur_cat[0] in "PS"


def _ends_sentence(piece: str) -> bool:
    stripped = piece.rstrip()
    while stripped and stripped[-1] in CLOSERS:
        stripped = stripped[:-1]
    return bool(stripped) and stripped[-1] in SENTENCE_END


class IncrementalTokenizer:
    """Turns pushed text into committed `TextToken`s, holding back a trailing partial word."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._pending = ""  # text after the last commit
        self._offset = 0  # characters committed before `_pending`

    @property
    def pending_text(self) -> str:
        return self._pending

    def push(self, text: str) -> list[TextToken]:
        """Add text; returns the tokens that became final."""
        self._pending += text
        cut = 0
        for b in range(len(self._pending) - 1, 0, -1):
            if _safe_boundary(self._pending, b):
                cut = b
                break
        return self._commit(cut)

    def flush(self) -> list[TextToken]:
        """Commit everything pushed so far, the trailing partial word included."""
        return self._commit(len(self._pending))

    def _commit(self, cut: int) -> list[TextToken]:
        if cut == 0:
            return []
        text = self._pending[:cut]
        encoding = self._tokenizer.encode_with_offsets(text)
        # A token covers its characters up to the next token's start, the last one up to the cut:
        # several byte-level tokens can share a character, and normalization can merge characters.
        bounds = [start for _, (start, _) in encoding[1:]] + [cut]
        pieces, done = [], 0
        for bound in bounds:
            end = max(done, bound)
            pieces.append((text[done:end], end))
            done = end
        tokens = []
        for i, ((token_id, _), (piece, end)) in enumerate(zip(encoding, pieces, strict=True)):
            # A closing quote after the full stop carries the sentence end, not the stop itself.
            closer_next = (
                i + 1 < len(pieces)
                and pieces[i + 1][0].strip() != ""
                and all(c in CLOSERS for c in pieces[i + 1][0].strip())
            )
            ends = bool(piece.strip()) and not closer_next and _ends_sentence(text[max(0, end - 16) : end])
            tokens.append(TextToken(token_id, piece, self._offset + end, ends))
        self._pending = self._pending[cut:]
        self._offset += cut
        return tokens
