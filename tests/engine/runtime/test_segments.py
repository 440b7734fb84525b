import pytest

from voicewire.engine.runtime.segments import HARD_STOP_SLACK, SegmentPolicy, SegmentQueue
from voicewire.engine.runtime.text_stream import TextToken

EOS, PAD = 9000, 9001


def _token(i: int, text: str = " w", sentence_end: bool = False) -> TextToken:
    return TextToken(100 + i, text, i + 1, sentence_end)


def test_a_sentence_end_after_enough_tokens_closes_the_segment() -> None:
    queue = SegmentQueue([], EOS, SegmentPolicy(sentence_tokens=3, max_tokens=None))
    queue.add(_token(0, ".", sentence_end=True))  # too early to cut
    queue.add(_token(1))
    queue.add(_token(2, ".", sentence_end=True))
    queue.add(_token(3))
    first, second = queue.segments
    assert first.complete and first.seq == [100, 101, 102, EOS] and first.body == 3
    assert not second.complete and second.seq == [103]


def test_the_token_cap_cuts_before_a_word_start() -> None:
    queue = SegmentQueue([], EOS, SegmentPolicy(sentence_tokens=None, max_tokens=2))
    for i, text in enumerate([" a", " b", "c", "d", " e"]):
        queue.add(_token(i, text))
    first, second = queue.segments
    assert first.seq == [100, 101, 102, 103, EOS]  # "c", "d" continue the word " b"
    assert second.seq == [104] and not second.complete


def test_the_hard_stop_cuts_inside_a_long_word() -> None:
    queue = SegmentQueue([], EOS, SegmentPolicy(sentence_tokens=None, max_tokens=2))
    for i in range(2 + HARD_STOP_SLACK + 1):
        queue.add(_token(i, "x"))
    assert [s.body for s in queue.segments] == [2 + HARD_STOP_SLACK, 1]


def test_reference_ids_open_every_segment_and_the_track_waits() -> None:
    queue = SegmentQueue([7, 8], EOS, SegmentPolicy(None, None))
    queue.add(_token(0))
    queue.add(_token(1))
    segment = queue.head
    assert segment is not None and segment.seq == [7, 8, 100, 101]
    segment.start = 3
    assert segment.next_id(PAD) == (101, _token(1))
    segment.frames = 1
    assert segment.next_id(PAD) is None  # out of text and not closed: wait, feed nothing
    queue.close(flushed=False)
    assert segment.next_id(PAD) == (EOS, None)
    segment.frames = 2
    assert segment.next_id(PAD) == (PAD, None)


def test_flush_closes_and_an_empty_flush_leaves_a_marker() -> None:
    queue = SegmentQueue([], EOS, SegmentPolicy())
    queue.add(_token(0))
    queue.close(flushed=True)
    queue.close(flushed=True)
    queue.close(flushed=False)  # end with nothing open adds nothing
    first, marker = queue.segments
    assert first.complete and first.flushed and first.seq == [100, EOS]
    assert marker.complete and marker.flushed and marker.seq == [] and marker.body == 0


def test_bad_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="sentence_tokens must be >= 1"):
        SegmentPolicy(sentence_tokens=0)
