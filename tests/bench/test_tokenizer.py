"""The real-size random checkpoints' tokenizer splits text about as Qwen2's does, in Qwen's files."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from voicewire.bench.load import TEXT as BENCH_TEXT
from voicewire.bench.tokenizer import gb2312_characters, train_bench_bpe
from voicewire.engine.model.checkpoint import write_json
from voicewire.engine.model.random_checkpoint import (
    CACHE_VERSIONS,
    SIZES,
    TEXT_IDS,
    TEXT_VOCAB_SIZE,
    model_config,
)
from voicewire.engine.model.text_tokenizer import (
    BPE_VOCAB_SIZE,
    SPECIAL_TOKENS,
    TextTokenizer,
    write_tiny_tokenizer,
    write_tokenizer,
)

# Ordinary prose, written for this test (not taken from the training lists): 99 words, 5 sentences.
ENGLISH = (
    "My grandmother grew up on a small farm near the coast. She still tells stories about the winter "
    "the river froze and her brothers skated all the way to the next village. She says the hardest "
    "part of the day was feeding the animals before sunrise, when the barn was so cold that the water "
    "in the buckets turned to ice. Years later she moved to the city, found work at a library, and met "
    "my grandfather there. They were married the following spring, and she has kept a photograph of "
    "that day on her kitchen table ever since."
)
# The same for Chinese: 105 characters, punctuation included.
CHINESE = (
    "周末的时候，我常常和家人一起去附近的市场买菜。市场里的人很多，卖水果的阿姨总是很热情地跟我们打招呼。"
    "买完菜以后，我们会在旁边的小饭馆吃一碗热腾腾的面条，然后慢慢走回家。虽然这样的生活很简单，但是我觉得非常幸福。"
)
# Qwen2's byte-level BPE (151,643 entries; its English merges are those of a large web-scale BPE)
# takes roughly 1.3 tokens per word of ordinary English prose, punctuation included, and one token
# per 1 to 1.5 Chinese characters (common characters are single tokens, common words too): the
# figures DESIGN.md's "Benchmarks must not flatter us" and issue 45 ask the random checkpoints to
# match. The bands are those figures with a margin either side, and no more: 512-entry BPE of the
# tiny checkpoint falls far outside both (about 3.7 tokens a word, 2.6 a character).
TOKENS_PER_WORD = (1.1, 1.5)
TOKENS_PER_CHAR = (0.6, 1.0)


@pytest.fixture(scope="module")
def trained() -> Tokenizer:
    return train_bench_bpe()


@pytest.fixture(scope="module")
def folder(trained: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tokenizer files as make_checkpoint writes them into a 0.6B checkpoint, with its config.json."""
    folder = tmp_path_factory.mktemp("bench_tokenizer")
    write_tokenizer(folder, trained)
    write_json(folder / "config.json", model_config("0.6b", "custom_voice"))
    return folder


@pytest.fixture(scope="module")
def tok(folder: Path) -> TextTokenizer:
    """The folder's tokenizer as the engine loads it (vocab.json + merges.txt + tokenizer_config.json)."""
    return TextTokenizer.from_folder(folder)


def per_word(tok: TextTokenizer, text: str) -> float:
    return len(tok.encode(text)) / len(text.split())


def per_char(tok: TextTokenizer, text: str) -> float:
    return len(tok.encode(text)) / len(text)


def test_english_and_chinese_split_about_as_qwen2(tok: TextTokenizer, tmp_path: Path) -> None:
    assert TOKENS_PER_WORD[0] <= per_word(tok, ENGLISH) <= TOKENS_PER_WORD[1]  # 1.27 measured
    assert TOKENS_PER_WORD[0] <= per_word(tok, BENCH_TEXT) <= TOKENS_PER_WORD[1]  # 1.23: the bench's text
    assert TOKENS_PER_CHAR[0] <= per_char(tok, CHINESE) <= TOKENS_PER_CHAR[1]  # 0.78
    # The tiny checkpoint's tokenizer is what the bands rule out.
    write_tiny_tokenizer(tmp_path)
    tiny = TextTokenizer.from_folder(tmp_path)
    assert per_word(tiny, ENGLISH) > 2 * TOKENS_PER_WORD[1]
    assert per_char(tiny, CHINESE) > 2 * TOKENS_PER_CHAR[1]


def test_common_words_and_characters_are_single_tokens(tok: TextTokenizer) -> None:
    for word in ("the", "She", "morning", "Thursday", "between", "kitchen", "anything"):
        assert len(tok.encode(" " + word)) == 1, word
    assert len(tok.encode("Thanks")) == 1  # a text's first word has no space before it
    characters = gb2312_characters()
    assert len(characters) == 6763
    assert all(len(tok.encode(c)) == 1 for c in characters[::97])
    assert [len(tok.encode(w)) for w in ("我们", "时候", "，", "。")] == [1, 1, 1, 1]
    text = "Mixed 中文 text, 123 digits, and a rare word: sesquipedalian! 😀"
    assert tok.decode(tok.encode(text)) == text


def test_the_published_vocabulary_size_and_special_ids(folder: Path, tok: TextTokenizer) -> None:
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert sorted(vocab.values()) == list(range(BPE_VOCAB_SIZE))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert {int(i): entry["content"] for i, entry in config["added_tokens_decoder"].items()} == SPECIAL_TOKENS
    assert all(tok.token_id(content) == i for i, content in SPECIAL_TOKENS.items())
    assert max(SPECIAL_TOKENS) < TEXT_VOCAB_SIZE  # the talker's text embedding has a row for each
    cfg = model_config("0.6b", "custom_voice")
    for name, token_id in TEXT_IDS.items():
        assert cfg[name] == token_id and token_id in SPECIAL_TOKENS
    # The official generate() slices the chat prefix at fixed offsets: it must be 3 tokens.
    assert tok.encode("<|im_start|>assistant\n") == [151644, tok.token_id("assistant"), tok.token_id("Ċ")]


def test_the_loader_gives_the_ids_of_tokenizers_own_encoding(tok: TextTokenizer, trained: Tokenizer) -> None:
    for text in (ENGLISH, CHINESE, BENCH_TEXT, "Line one.\nLine two:  spaced\ttab 3.14 ok?"):
        assert tok.encode(text) == trained.encode(text, add_special_tokens=False).ids


def test_training_is_deterministic(folder: Path, tmp_path: Path) -> None:
    # Cached checkpoints (tiny.CACHE_VERSIONS) stay valid only if every build writes the same files.
    write_tokenizer(tmp_path, train_bench_bpe())
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name
    assert set(CACHE_VERSIONS) == set(SIZES)


def test_ids_identical_to_official_processor(
    oracle, folder: Path, tok: TextTokenizer, tmp_path: Path
) -> None:
    texts = [f"<|im_start|>assistant\n{text}<|im_end|>\n" for text in (ENGLISH, CHINESE, BENCH_TEXT)]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    oracle("text_ids.py", str(folder), str(tmp_path / "texts.json"), str(tmp_path / "ids.json"))
    official = json.loads((tmp_path / "ids.json").read_text())
    for text, ids in zip(texts, official, strict=True):
        assert tok.encode(text) == ids
