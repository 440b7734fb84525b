"""Word timing: the words of a context's text and when each starts in its audio, from the frames at
which the text entered the talker (docs/protocol.md, "Word timing").

Pure: the session feeds it text as it enters (`WordTimer.enter`) and the audio it has sent
(`WordTimer.take`); `frame_pieces` splits a chunk's text among its frames by token ids.

Words: a run of non-space characters is a word, except that a character of a script written
without spaces (Han, kana, Thai, ...) is a word of its own; punctuation and symbols stay with the
word they follow (a run of only punctuation after a space joins the word before it), and combining
marks with their base character.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# Scripts written without spaces between words: each character is a word. Hangul is written with
# spaces, so it is split like Latin.
_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B-G
)


def unspaced(char: str) -> bool:
    """A character of a script written without spaces (a word by itself)."""
    code = ord(char)
    return any(low <= code <= high for low, high in _UNSPACED)


def _wordlike(char: str) -> bool:
    """Letters and digits make a word real; punctuation and symbols only ride along."""
    return unicodedata.category(char)[0] in "LN"


@dataclass(frozen=True)
class Word:
    text: str
    start_char: int  # offsets into all text the client sent for the context
    end_char: int
    start: int  # output samples
    end: int


@dataclass
class _Open:
    start_char: int
    end_char: int
    start: int  # output samples, lag included
    real: bool  # holds a letter, digit or unspaced character (else only punctuation so far)
    last_unspaced: bool  # its last base character is unspaced


class WordTimer:
    """One context's words, as its text enters the talker and its audio goes out.

    `enter(start_char, text, at)`: `text`, which begins at character `start_char` of the context's
    text, entered the talker at output sample `at`. A word's start is `at` of its first character
    plus `lag`; its end is the next word's start, so a word is known once the next one has begun.
    """

    def __init__(self, lag: int) -> None:
        if lag < 0:
            raise ValueError(f"the word lag must be >= 0 samples, got {lag}")
        self.lag = lag
        self._text: list[str] = []  # the context's text, as far as it has entered
        self._words: list[_Open] = []  # not yet sent; all but the last real one are complete
        self._open = False  # the last word takes the next non-space character
        self._last_start = 0  # starts never go back, whatever `at` the caller passes
        self._given: list[tuple[int, int]] = []  # (start, end_char) of the words given, for `heard`

    @property
    def consumed(self) -> int:
        """Characters of the context's text that have entered."""
        return len(self._text)

    def enter(self, start_char: int, text: str, at: int) -> None:
        if start_char != self.consumed:
            raise ValueError(
                f"text must enter in order: expected character {self.consumed}, got {start_char}"
            )
        start = max(at + self.lag, self._last_start)
        for char in text:
            self._char(char, start)
        self._last_start = start

    def _char(self, char: str, start: int) -> None:
        index = len(self._text)
        self._text.append(char)
        if char.isspace():
            self._open = False
            return
        current = self._words[-1] if self._words else None
        category = unicodedata.category(char)
        if category[0] == "M" and current is not None and current.end_char == index:
            current.end_char = index + 1  # a combining mark stays with its base character
            return
        is_unspaced, wordlike = unspaced(char), _wordlike(char)
        if current is not None and self._open:
            joins = not (is_unspaced and current.real) and not (
                wordlike and not is_unspaced and current.last_unspaced
            )
            if joins:
                current.end_char = index + 1
                current.real = current.real or wordlike or is_unspaced
                if wordlike or is_unspaced:
                    current.last_unspaced = is_unspaced
                return
        self._begin(_Open(index, index + 1, start, wordlike or is_unspaced, is_unspaced))

    def _begin(self, word: _Open) -> None:
        # A run of only punctuation ("-", "...") that a space closed joins the word before it.
        if len(self._words) >= 2 and not self._words[-1].real:
            punct = self._words.pop()
            self._words[-1].end_char = punct.end_char
        self._words.append(word)
        self._open = True

    def take(self, sent: int) -> list[Word]:
        """The complete words that start within the first `sent` output samples, in order: a word
        is complete once the next real word has begun (its end is that word's start)."""
        ready: list[Word] = []
        while len(self._words) >= 2 and self._words[0].start < sent:
            if not self._words[1].real:  # may still join self._words[0]
                break
            ready.append(self._word(self._words.pop(0), self._words[0].start))
        return ready

    def finish(self, total: int) -> list[Word]:
        """The words still held, when the context's audio is all out (`total` output samples): the
        last ends at `total`, and a start past it (the lag) is moved back to it."""
        if len(self._words) >= 2 and not self._words[-1].real:
            punct = self._words.pop()
            self._words[-1].end_char = punct.end_char
        ready = []
        for i, word in enumerate(self._words):
            word.start = min(word.start, total)
            end = min(self._words[i + 1].start, total) if i + 1 < len(self._words) else total
            ready.append(self._word(word, max(end, word.start)))
        self._words.clear()
        self._open = False
        return ready

    def heard(self, before: int) -> str:
        """The context's text from its start through the last word that starts before output sample
        `before`, given or not ("" when none does): what a listener who has played that far heard."""
        end_char = 0
        for start, word_end in self._given:
            if start < before:
                end_char = word_end
        for word in self._words:
            if word.start < before:
                end_char = word.end_char
        return "".join(self._text[:end_char])

    def _word(self, word: _Open, end: int) -> Word:
        self._given.append((word.start, word.end_char))
        text = "".join(self._text[word.start_char : word.end_char])
        return Word(text, word.start_char, word.end_char, word.start, end)


def frame_pieces(text: str, frame_ids: Sequence[int], tokens: Sequence[tuple[int, int]]) -> list[str]:
    """Split `text`, the text that entered the talker during a chunk's frames, among those frames.

    `frame_ids`: the text-track id each frame was fed; `tokens`: (id, start character in `text`)
    of `text` re-encoded by the checkpoint's tokenizer. A frame fed a text token took that token,
    and a prefill's tokens (the lookahead) enter with the frame after them; so the tokens are
    aligned to the frames by the longest common subsequence of ids, later tokens first, and a token
    left unmatched goes with the next matched one (trailing ones with the frame after the last
    match). Returns one piece per frame; the pieces join to `text`.
    """
    n, m = len(frame_ids), len(tokens)
    pieces = [""] * n
    if n == 0 or m == 0:
        if text and n == 0:
            raise ValueError("text entered during a chunk with no frames")
        if text and m == 0:
            raise ValueError("text with no tokens")
        return pieces
    # lcs[i][j]: the longest common subsequence of tokens[i:] and frame_ids[j:]
    lcs = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            if tokens[i][0] == frame_ids[j]:
                lcs[i][j] = lcs[i + 1][j + 1] + 1
            else:
                lcs[i][j] = max(lcs[i + 1][j], lcs[i][j + 1])
    frame_of: list[int | None] = [None] * m
    i = j = 0
    while i < m and j < n:
        # Skip a token rather than match it when a later token can take this frame just as well:
        # the frame's own token is the last of those that entered with it.
        if tokens[i][0] == frame_ids[j] and lcs[i + 1][j] < lcs[i][j]:
            frame_of[i] = j
            i, j = i + 1, j + 1
        elif lcs[i + 1][j] >= lcs[i][j + 1]:
            i += 1
        else:
            j += 1
    after = min(max((f for f in frame_of if f is not None), default=-1) + 1, n - 1)
    following: int = after
    for k in range(m - 1, -1, -1):
        found = frame_of[k]
        following = found if found is not None else following
        frame_of[k] = following
    bounds = [start for _, start in tokens[1:]] + [len(text)]
    done = 0
    for k, bound in enumerate(bounds):
        end = max(done, bound)
        frame = frame_of[k]
        assert frame is not None
        pieces[frame] += text[done:end]
        done = end
    return pieces
