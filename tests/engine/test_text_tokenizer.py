import json
from pathlib import Path

import pytest

from voicewire.engine.checkpoint import write_json
from voicewire.engine.text_tokenizer import TextTokenizer, write_tiny_tokenizer
from voicewire.engine.tiny import model_config

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
