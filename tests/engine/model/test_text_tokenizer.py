import json
import shutil
from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from voicewire.engine.model.checkpoint import CheckpointError, write_json
from voicewire.engine.model.random_checkpoint import model_config
from voicewire.engine.model.text_tokenizer import (
    QWEN2_REGEX,
    SPECIAL_TOKENS,
    TextTokenizer,
    write_tiny_tokenizer,
)

TEXTS = [
    "<|im_start|>assistant\nHello there, this is a test.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>assistant\n你好，世界。今天天气很好！<|im_end|>\n",
    "<|im_start|>user\nA warm, low voice; slightly hoarse.<|im_end|>\n",
    "The quick brown fox's tail: it's 42.5 degrees!!  OK?\n\nNew paragraph\r\n",
    "camelCaseWord HTTPServer don't I'LL WE'RE",
    "emoji 😀🎉 and tabs\t\tend   ",
    "mixed 中文 and English 123 abc",
    "   leading spaces and trailing\n",
    "",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tokenizer with a config.json that triggers the official regex swap, and one that does not."""
    out = {}
    for name, version in (("patched", None), ("qwen2", "4.57.1")):
        folder = tmp_path_factory.mktemp(name)
        write_tiny_tokenizer(folder)
        config = model_config("tiny", "custom_voice")
        if version:
            config["transformers_version"] = version
        write_json(folder / "config.json", config)
        out[name] = folder
    return out


@pytest.mark.parametrize("which", ["patched", "qwen2"])
def test_ids_identical_to_official_processor(
    oracle, folders: dict[str, Path], which: str, tmp_path: Path
) -> None:
    (tmp_path / "texts.json").write_text(json.dumps(TEXTS))
    oracle("text_ids.py", str(folders[which]), str(tmp_path / "texts.json"), str(tmp_path / "ids.json"))
    official = json.loads((tmp_path / "ids.json").read_text())
    ours = TextTokenizer.from_folder(folders[which])
    for text, ids in zip(TEXTS, official, strict=True):
        assert ours.encode(text) == ids, text


def test_regex_choice_follows_config_version(folders: dict[str, Path]) -> None:
    # The swapped regex splits camelCase words; Qwen2's keeps them whole.
    def pieces(which: str) -> list[str]:
        pre = TextTokenizer.from_folder(folders[which])._tok.pre_tokenizer
        return [piece for piece, _ in pre.pre_tokenize_str("camelCaseWord")]

    assert pieces("patched") == ["camel", "Case", "Word"]
    assert pieces("qwen2") == ["camelCaseWord"]


def test_role_prefix_is_three_tokens_and_specials_keep_their_ids(folders: dict[str, Path]) -> None:
    tok = TextTokenizer.from_folder(folders["patched"])
    assert tok.encode("<|im_start|>assistant\n") == [151644, tok.token_id("assistant"), tok.token_id("Ċ")]
    assert tok.token_id("<|im_end|>") == 151645
    assert tok.token_id("<tts_pad>") == 151671
    assert tok.token_id("<tts_text_eod>") == 151673
    text = "Round trip: 你好, world! 😀"
    assert tok.decode(tok.encode(text)) == text


def test_missing_tokenizer_file_is_named(tmp_path: Path) -> None:
    write_tiny_tokenizer(tmp_path)
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(Exception, match=r"merges\.txt"):
        TextTokenizer.from_folder(tmp_path)


def as_tokenizer_json(folder: Path, keep_config: bool = True) -> Path:
    """Replace vocab.json + merges.txt by the tokenizer.json `save_pretrained` writes for them
    (transformers' Qwen2Converter: NFC, Qwen2's split then byte-level, the added tokens at their ids)."""
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    declared = json.loads((folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    for token_id, entry in sorted(declared.items(), key=lambda kv: int(kv[0])):
        fields = {k: entry[k] for k in ("single_word", "lstrip", "rstrip", "normalized", "special")}
        tok.add_tokens([AddedToken(entry["content"], **fields)])
        assert tok.token_to_id(entry["content"]) == int(token_id)  # the ids follow the vocabulary
    tok.save(str(folder / "tokenizer.json"))
    (folder / "vocab.json").unlink()
    (folder / "merges.txt").unlink()
    if not keep_config:
        (folder / "tokenizer_config.json").unlink()
    return folder


SPECIAL_TEXTS = [
    "".join(SPECIAL_TOKENS.values()),
    "<tts_text_bos>Hi.<tts_text_eod><tts_pad><|audio_start|>x<|audio_end|>",
    "<think>不</think><tool_call>{}</tool_call> <|endoftext|>",
    "Punctuation: «quotes», — dashes… (parens) [brackets] {braces}; 100%! ¿Qué? 。，！？",
]


@pytest.mark.parametrize("which", ["patched", "qwen2"])
@pytest.mark.parametrize("keep_config", [True, False], ids=["with tokenizer_config", "alone"])
def test_tokenizer_json_gives_the_same_ids_as_vocab_and_merges(
    folders: dict[str, Path], which: str, keep_config: bool, tmp_path: Path
) -> None:
    original = TextTokenizer.from_folder(folders[which])
    converted = as_tokenizer_json(Path(shutil.copytree(folders[which], tmp_path / "fast")), keep_config)
    assert sorted(p.name for p in converted.iterdir()) == sorted(
        ["config.json", "tokenizer.json"] + (["tokenizer_config.json"] if keep_config else [])
    )
    fast = TextTokenizer.from_folder(converted)
    for text in TEXTS + SPECIAL_TEXTS:
        ids = original.encode(text)
        assert fast.encode(text) == ids, text
        assert fast.encode_with_offsets(text) == original.encode_with_offsets(text), text
        assert fast.decode(ids) == original.decode(ids) == text
    for token_id, content in SPECIAL_TOKENS.items():
        assert fast.token_id(content) == original.token_id(content) == token_id
        assert fast.encode(content) == [token_id]
    assert len(original.encode(SPECIAL_TEXTS[0])) == len(SPECIAL_TOKENS)
    assert fast.encode("Hello there, this is a test.") == original.encode("Hello there, this is a test.")
    assert len(fast.encode("你好，世界。")) < len("你好，世界。".encode())  # merges apply to Chinese too


def test_tokenizer_json_from_save_pretrained(oracle, folders: dict[str, Path], tmp_path: Path) -> None:
    # The official processor's own tokenizer.json (it writes vocab.json and merges.txt too: dropped).
    saved = tmp_path / "saved"
    oracle("save_tokenizer.py", str(folders["patched"]), str(saved))
    folder = tmp_path / "fast"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(saved / name, folder / name)
    shutil.copy(folders["patched"] / "config.json", folder / "config.json")
    original, fast = TextTokenizer.from_folder(folders["patched"]), TextTokenizer.from_folder(folder)
    for text in TEXTS + SPECIAL_TEXTS:
        assert fast.encode(text) == original.encode(text), text
        assert fast.encode_with_offsets(text) == original.encode_with_offsets(text), text


def test_tokenizer_json_added_tokens_are_honoured_and_checked(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = as_tokenizer_json(Path(shutil.copytree(folders["patched"], tmp_path / "fast")))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    # One more token declared in tokenizer_config.json only: added at its declared id.
    extra = dict(config["added_tokens_decoder"]["151675"], content="<|extra|>")
    config["added_tokens_decoder"]["151676"] = extra
    config_path.write_text(json.dumps(config))
    tok = TextTokenizer.from_folder(folder)
    assert tok.token_id("<|extra|>") == 151676 and tok.encode("a<|extra|>") == [tok.token_id("a"), 151676]
    assert tok.token_id("<|im_end|>") == 151645
    # tokenizers numbers added tokens without gaps, so an id past one is refused, not moved.
    config["added_tokens_decoder"]["151700"] = config["added_tokens_decoder"].pop("151676")
    config_path.write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"'<\|extra\|>' is declared with id 151700 but loads as 151676"
    ):
        TextTokenizer.from_folder(folder)
    del config["added_tokens_decoder"]["151700"]
    # The two files disagreeing on a token's id is an error that names both.
    config["added_tokens_decoder"]["151676"] = config["added_tokens_decoder"].pop("151645")
    config_path.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"'<\|im_end\|>' has id 151645 in tokenizer.json but 151676"):
        TextTokenizer.from_folder(folder)
    # A tokenizer.json without the chat markers would split them into pieces: refused.
    config_path.unlink()
    spec = json.loads((folder / "tokenizer.json").read_text())
    next(t for t in spec["added_tokens"] if t["content"] == "<|im_start|>")["content"] = "<|im_begin|>"
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match=r"does not declare the special token '<\|im_start\|>'"):
        TextTokenizer.from_folder(folder)
    spec["model"] = {"type": "WordPiece", "vocab": {"a": 0}}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(CheckpointError, match="holds a WordPiece model"):
        TextTokenizer.from_folder(folder)


def test_a_folder_with_neither_form_names_both(tmp_path: Path) -> None:
    write_tiny_tokenizer(tmp_path)
    (tmp_path / "vocab.json").unlink()
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(CheckpointError) as info:
        TextTokenizer.from_folder(tmp_path)
    message = str(info.value)
    assert "holds no text tokenizer" in message
    assert "tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json" in message
