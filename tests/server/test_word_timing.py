"""Word splitting and timing (server/word_timing.py), without a server."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicewire.server.word_timing import WordTimer, frame_pieces


def _words(text: str, pieces: list[str] | None = None, lag: int = 0, step: int = 100) -> list:
    """Time `text` entering in `pieces` (one per frame of `step` samples), all audio sent."""
    timer = WordTimer(lag)
    char, words = 0, []
    for frame, piece in enumerate(pieces if pieces is not None else list(text)):
        timer.enter(char, piece, frame * step)
        char += len(piece)
        words += timer.take(10**9)
    return words + timer.finish(len(text) * step + lag)


def test_words_split_at_spaces_with_punctuation_on_the_word_before() -> None:
    words = _words("Hello, world — how's it going?  Fine.")
    assert [w.text for w in words] == ["Hello,", "world —", "how's", "it", "going?", "Fine."]
    text = "Hello, world — how's it going?  Fine."
    assert all(text[w.start_char : w.end_char] == w.text for w in words)


def test_cjk_splits_by_character_and_keeps_its_punctuation() -> None:
    words = _words("「你好」，世界。abc def")
    assert [w.text for w in words] == ["「你", "好」，", "世", "界。", "abc", "def"]


def test_times_are_the_entering_frame_plus_the_lag_and_end_at_the_next_start() -> None:
    words = _words("ab cd", pieces=["ab", " c", "d"], lag=30)
    assert [(w.text, w.start, w.end) for w in words] == [("ab", 30, 130), ("cd", 130, 530)]


def test_a_word_goes_out_once_its_start_is_sent_and_the_next_word_began() -> None:
    timer = WordTimer(50)
    timer.enter(0, "one two", 0)  # both start at 50
    assert timer.take(50) == []  # sample 50 not sent yet
    assert [w.text for w in timer.take(51)] == ["one"]
    assert timer.take(10**6) == []  # "two" may still grow
    timer.enter(7, " three", 100)
    assert [(w.text, w.end) for w in timer.take(10**6)] == [("two", 150)]
    assert [(w.text, w.start, w.end) for w in timer.finish(120)] == [("three", 120, 120)]


def test_heard_is_the_text_through_the_last_word_begun() -> None:
    timer = WordTimer(0)
    for i, piece in enumerate(["Hi", " there,", " you", " all"]):
        timer.enter(sum(map(len, ["Hi", " there,", " you", " all"][:i])), piece, i * 10)
    timer.take(15)
    assert timer.heard(0) == ""
    assert timer.heard(5) == "Hi"
    assert timer.heard(11) == "Hi there,"
    assert timer.heard(31) == "Hi there, you all"


def test_out_of_order_text_and_a_negative_lag_are_refused() -> None:
    with pytest.raises(ValueError, match="in order"):
        WordTimer(0).enter(3, "x", 0)
    with pytest.raises(ValueError, match=">= 0"):
        WordTimer(-1)


def test_frame_pieces_give_a_prefill_its_first_frame_and_each_frame_its_token() -> None:
    # "ab cd ef": tokens ab(1) " cd"(2) " ef"(3); the prefill took ab and " cd" with frame 0, whose
    # own token is " cd"; frame 1 took " ef", frame 2 was tts_eos (9).
    assert frame_pieces("ab cd ef", [2, 3, 9], [(1, 0), (2, 2), (3, 5)]) == ["ab cd", " ef", ""]
    # the next segment's prefill enters with its first frame, after the last one's eos and pads
    assert frame_pieces("x yz w", [1, 9, 8, 3], [(1, 0), (2, 1), (3, 4)]) == ["x", "", "", " yz w"]
    # a short segment all in its prefill enters with its tts_eos frame
    assert frame_pieces("hi", [9], [(5, 0)]) == ["hi"]
    assert frame_pieces("", [7, 7], []) == ["", ""]
    with pytest.raises(ValueError, match="no frames"):
        frame_pieces("a", [], [(1, 0)])


_alphabet = st.sampled_from(list("ab1 .,!?-'\"你好世界。、「」カナ\u0e01\u0e34 \n"))


@given(st.text(_alphabet, max_size=60), st.data())
def test_words_cover_the_text_once_in_order_and_their_times_never_go_back(text: str, data) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(text) - 1, 1)), max_size=20)))
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    words = _words(text, pieces, lag=7)
    covered = [i for w in words for i in range(w.start_char, w.end_char)]
    assert covered == sorted(set(covered))  # in order, none twice
    assert {i for i, c in enumerate(text) if not c.isspace()} <= set(covered)
    assert all(not text[w.start_char].isspace() and not text[w.end_char - 1].isspace() for w in words)
    assert all(w.text == text[w.start_char : w.end_char] for w in words)
    assert all(a.end == b.start for a, b in itertools.pairwise(words))
    assert all(w.start <= w.end for w in words)
    han = [w for w in words if any("\u4e00" <= c <= "\u9fff" for c in w.text)]
    assert all(sum("\u4e00" <= c <= "\u9fff" for c in w.text) == 1 for w in han)
