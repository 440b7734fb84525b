import itertools
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicewire.engine.model.text_tokenizer import PATCHED_REGEX, QWEN2_REGEX, TextTokenizer
from voicewire.engine.runtime.text_stream import IncrementalTokenizer, PackedTokens, TextToken

PIECES = [
    "Hello",
    " there",
    ",",
    " world",
    ".",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "it's",
    " don'T",
    "12",
    "3.5",
    "x1y2",
    "你好",
    "，",
    "世界",
    "。",
    "(",
    ")",
    '"',
    "...",
    "?!",
    " ",
    "Ünïcödé",
    "e\u0301",
    "-",
    "—",
    "A",
    "camelCase",
]


@pytest.fixture(scope="module", params=["qwen2", "patched"])
def tokenizer(request, tiny_checkpoints) -> TextTokenizer:
    from tokenizers import Regex, pre_tokenizers

    tok = TextTokenizer.from_folder(tiny_checkpoints["custom_voice"])
    regex = QWEN2_REGEX if request.param == "qwen2" else PATCHED_REGEX
    tok._tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tok


def _push_in_pieces(tok: TextTokenizer, text: str, cuts: list[int]) -> list[TextToken]:
    stream = IncrementalTokenizer(tok)
    out: list[TextToken] = []
    last = 0
    for cut in sorted(set(cuts)):
        out += stream.push(text[last:cut])
        last = cut
    out += stream.push(text[last:])
    return out + stream.flush()


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=25),
    cut_fractions=st.lists(st.floats(0, 1), max_size=12),
)
def test_any_split_gives_the_ids_of_the_whole_text(tokenizer: TextTokenizer, parts, cut_fractions) -> None:
    text = "".join(parts)
    cuts = [int(f * len(text)) for f in cut_fractions]
    tokens = _push_in_pieces(tokenizer, text, cuts)
    assert [t.id for t in tokens] == tokenizer.encode(text)
    assert "".join(t.text for t in tokens) == text
    assert [t.end for t in tokens] == sorted(t.end for t in tokens) and (
        not tokens or tokens[-1].end == len(text)
    )


def test_single_characters_give_the_ids_of_the_whole_text(tokenizer: TextTokenizer) -> None:
    text = "Good morning, everyone! How are you today? 你好，世界。 It's 10:30."
    assert [t.id for t in _push_in_pieces(tokenizer, text, list(range(len(text))))] == tokenizer.encode(text)


def test_a_trailing_partial_word_waits_for_a_boundary(tokenizer: TextTokenizer) -> None:
    stream = IncrementalTokenizer(tokenizer)
    assert stream.push("Hello") == [] and stream.pending_text == "Hello"
    committed = stream.push(" wor")
    assert "".join(t.text for t in committed) == "Hello" and stream.pending_text == " wor"
    committed = stream.push("ld, friend")
    assert "".join(t.text for t in committed) == " world," and stream.pending_text == " friend"
    assert "".join(t.text for t in stream.flush()) == " friend" and stream.pending_text == ""


def test_chinese_commits_at_punctuation(tokenizer: TextTokenizer) -> None:
    stream = IncrementalTokenizer(tokenizer)
    assert "".join(t.text for t in stream.push("你好，世")) == "你好"
    assert stream.pending_text == "，世"


def test_sentence_ends_are_marked(tokenizer: TextTokenizer) -> None:
    stream = IncrementalTokenizer(tokenizer)
    tokens = stream.push('He said "stop." Then? 好。 Done') + stream.flush()
    ends = ["".join(t.text for t in tokens[: i + 1]) for i, t in enumerate(tokens) if t.sentence_end]
    assert ends == ['He said "stop."', 'He said "stop." Then?', 'He said "stop." Then? 好。']


def test_random_long_text_in_random_pieces(tokenizer: TextTokenizer) -> None:
    rng = random.Random(3)
    text = "".join(rng.choice(PIECES) for _ in range(2000))
    cuts = [rng.randrange(len(text)) for _ in range(400)]
    assert [t.id for t in _push_in_pieces(tokenizer, text, cuts)] == tokenizer.encode(text)


@settings(max_examples=100, deadline=None)
@given(
    parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=25),
    cut_fractions=st.lists(st.floats(0, 1), max_size=12),
)
def test_packed_tokens_cross_a_pipe_unchanged(tokenizer: TextTokenizer, parts, cut_fractions) -> None:
    """Each push's tokens, and the flushed tail, as the engine process rebuilds them (tokens that
    share a character, with no text of their own, included)."""
    text = "".join(parts)
    cuts = sorted({int(f * len(text)) for f in cut_fractions} | {0, len(text)})
    stream = IncrementalTokenizer(tokenizer)
    batches = [stream.push(text[a:b]) for a, b in itertools.pairwise(cuts)] + [stream.flush()]
    for batch in batches:
        packed = pickle.loads(pickle.dumps(PackedTokens.of(batch), protocol=pickle.HIGHEST_PROTOCOL))
        assert packed.unpack() == batch
    assert "".join(t.text for batch in batches for t in batch) == text
