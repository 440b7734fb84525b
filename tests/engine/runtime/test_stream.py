"""The engine's stream (engine/runtime/stream.py), controller side: what text and marks put in its
inbox, tokenized by the stream itself (`push_text`) or by its controller (`push_tokens`)."""

import time

import pytest

from voicewire.engine.config import StreamOptions
from voicewire.engine.errors import StreamClosed
from voicewire.engine.model.text_tokenizer import TextTokenizer
from voicewire.engine.runtime.stream import Mark, Stream
from voicewire.engine.runtime.text_stream import IncrementalTokenizer, TextToken
from voicewire.engine.voice import Voice


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoints) -> TextTokenizer:
    return TextTokenizer.from_folder(tiny_checkpoints["custom_voice"])


def _stream(tokenizer: TextTokenizer, wakes: list[int] | None = None) -> Stream:
    woken = wakes if wakes is not None else []
    return Stream(1, Voice(speaker="ryan"), StreamOptions(), tokenizer, lambda: woken.append(1))


def _text(items: list[TextToken | Mark]) -> str:
    return "".join(item.text for item in items if isinstance(item, TextToken))


def test_text_pushed_here_and_tokens_pushed_by_the_controller_fill_the_same_inbox(
    tokenizer: TextTokenizer,
) -> None:
    here, there = _stream(tokenizer), _stream(tokenizer)
    controller = IncrementalTokenizer(tokenizer)
    for piece in ["Hel", "lo the", "re, fri"]:
        here.push_text(piece)
        there.push_tokens(controller.push(piece))
    here.flush()
    there.push_tokens(controller.flush(), Mark.FLUSH)
    for piece in ["", "end. How", " are", " yo"]:
        here.push_text(piece)
        there.push_tokens(controller.push(piece))
    here.end()
    there.push_tokens(controller.flush(), Mark.END)
    items, cancelled = here.take_inbox()
    assert (items, cancelled) == there.take_inbox() and not cancelled
    # Each mark after the tail the tokenizer flushed for it.
    flush = items.index(Mark.FLUSH)
    assert _text(items[:flush]) == "Hello there, fri" and items[-1] is Mark.END
    assert _text(items[flush:]) == "end. How are yo" and items.count(Mark.FLUSH) == 1
    assert [t.id for t in items if isinstance(t, TextToken)] == tokenizer.encode(
        "Hello there, friend. How are yo"
    )


def test_the_end_closes_the_stream_to_text_and_marks(tokenizer: TextTokenizer) -> None:
    stream = _stream(tokenizer)
    stream.push_tokens([], Mark.END)
    for push in (lambda: stream.push_tokens([]), lambda: stream.push_text("more"), stream.flush, stream.end):
        with pytest.raises(StreamClosed, match="has ended"):
            push()
    assert stream.take_inbox() == ([Mark.END], False)
    cancelled = _stream(tokenizer)
    cancelled.cancel()
    with pytest.raises(StreamClosed, match="was cancelled"):
        cancelled.push_tokens([])


def test_the_first_text_time_is_that_of_the_first_push_even_one_that_commits_nothing(
    tokenizer: TextTokenizer,
) -> None:
    wakes: list[int] = []
    stream = _stream(tokenizer, wakes)
    stream.flush()  # a mark is no text
    assert stream.first_text_at is None
    before = time.monotonic()
    stream.push_tokens([])  # a controller's push of a partial word
    first = stream.first_text_at
    assert first is not None and first >= before
    stream.push_text("Hello there")
    assert stream.first_text_at == first
    assert len(wakes) == 3  # the scheduler is woken for each
    pushed_here = _stream(tokenizer)
    pushed_here.push_text("Hel")
    assert pushed_here.first_text_at is not None and pushed_here.take_inbox() == ([], False)
