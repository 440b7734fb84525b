"""The Qwen2 byte-level BPE text tokenizer, built with `tokenizers` from a checkpoint folder.

Qwen publishes vocab.json + merges.txt + tokenizer_config.json (special tokens in
`added_tokens_decoder`); `save_pretrained`, and many mirrors and fine-tunes, ship one tokenizer.json
(special tokens in `added_tokens`) instead. Either gives the same ids; tokenizer.json is used when
present, and tokenizer_config.json's added tokens are honoured beside it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from voicewire.engine.model.checkpoint import CheckpointError, read_json, tokenizer_forms_text

# Qwen2's split regex, and the one the official loader swaps in (transformers 4.57.3 with
# fix_mistral_regex=True replaces it unless config.json's transformers_version is <= 4.57.2 or >= 5).
QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
PATCHED_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Special tokens at their released ids (Qwen3 + the TTS additions), contiguous after the
# 151643-entry BPE vocabulary: tokenizers numbers added tokens right after the vocabulary.
BPE_VOCAB_SIZE = 151643
SPECIAL_TOKENS: dict[int, str] = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>",
    151648: "<|box_start|>",
    151649: "<|box_end|>",
    151650: "<|quad_start|>",
    151651: "<|quad_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151654: "<|vision_pad|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
    151657: "<tool_call>",
    151658: "</tool_call>",
    151659: "<|fim_prefix|>",
    151660: "<|fim_middle|>",
    151661: "<|fim_suffix|>",
    151662: "<|fim_pad|>",
    151663: "<|repo_name|>",
    151664: "<|file_sep|>",
    151665: "<tool_response>",
    151666: "</tool_response>",
    151667: "<think>",
    151668: "</think>",
    151669: "<|audio_start|>",
    151670: "<|audio_end|>",
    151671: "<tts_pad>",
    151672: "<tts_text_bos>",
    151673: "<tts_text_eod>",
    151674: "<tts_text_bos_single>",
    151675: "<|audio_pad|>",
}


def _uses_patched_regex(config: dict) -> bool:
    version = str(config.get("transformers_version") or "")
    try:
        parts = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return True
    return not parts or (4, 57, 2) < parts < (5, 0, 0)


class TextTokenizer:
    """Text to token ids as the official processor produces them."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer

    @classmethod
    def from_folder(cls, folder: str | Path) -> TextTokenizer:
        folder = Path(folder)
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
        if (folder / "tokenizer.json").is_file():
            spec, where = _fast_spec(folder / "tokenizer.json"), "tokenizer.json"
        elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            spec, where = _spec_from_vocab_and_merges(folder), "vocab.json + merges.txt"
        else:
            raise CheckpointError(f"{folder} holds no text tokenizer: it needs {tokenizer_forms_text()}")
        tok = _with_added_tokens(spec, folder, where)
        # The chat markers the prompt spells out in text must each be one token.
        for marker in ("<|im_start|>", "<|im_end|>"):
            if tok.token_to_id(marker) is None:
                raise CheckpointError(
                    f"{folder}: the text tokenizer ({where}) does not declare the special token {marker!r}"
                )
        regex = PATCHED_REGEX if _uses_patched_regex(config) else QWEN2_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> list[tuple[int, tuple[int, int]]]:
        """Ids with the character span of `text` each covers."""
        encoding = self._tok.encode(text, add_special_tokens=False)
        return list(zip(encoding.ids, encoding.offsets, strict=True))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        found = self._tok.token_to_id(token)
        if found is None:
            raise KeyError(f"token {token!r} is not in the vocabulary")
        return found


def _fast_spec(path: Path) -> dict:
    """tokenizer.json as `tokenizers` writes it, checked to be a BPE (its added tokens kept)."""
    spec = read_json(path)
    model = spec.get("model") if isinstance(spec, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "BPE":
        raise CheckpointError(f"{path} holds a {kind or 'missing'} model; Qwen's text tokenizer is a BPE")
    if not isinstance(spec.get("added_tokens"), list):
        spec["added_tokens"] = []
    return spec


def _spec_from_vocab_and_merges(folder: Path) -> dict:
    """The tokenizer.json that vocab.json + merges.txt make (Qwen2Converter's), before added tokens."""
    if not (folder / "tokenizer_config.json").is_file():
        raise CheckpointError(
            f"tokenizer file {folder / 'tokenizer_config.json'} is missing (it declares the special tokens)"
        )
    vocab = read_json(folder / "vocab.json")
    merges: list[tuple[str, str]] = []
    with open(folder / "merges.txt", encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            left, right = line.split(" ")
            merges.append((left, right))
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    return json.loads(tok.to_str())


def _with_added_tokens(spec: dict, folder: Path, where: str) -> Tokenizer:
    """The tokenizer of `spec` with tokenizer_config.json's added tokens (when there is one) at their
    declared ids, beside those `spec` holds already; an id that disagrees is an error."""
    config = folder / "tokenizer_config.json"
    declared = read_json(config).get("added_tokens_decoder", {}) if config.is_file() else {}
    held = {
        entry.get("content"): entry.get("id") for entry in spec["added_tokens"] if isinstance(entry, dict)
    }
    for token_id, entry in declared.items():
        content = entry["content"]
        if content in held:
            if held[content] != int(token_id):
                raise CheckpointError(
                    f"{folder}: added token {content!r} has id {held[content]} in {where} but "
                    f"{token_id} in tokenizer_config.json"
                )
            continue
        # The tokenizers API numbers added tokens after the vocabulary; its JSON form keeps given ids
        # while they follow on without a gap (checked below).
        spec["added_tokens"].append(
            {
                "id": int(token_id),
                "content": content,
                "single_word": entry.get("single_word", False),
                "lstrip": entry.get("lstrip", False),
                "rstrip": entry.get("rstrip", False),
                "normalized": entry.get("normalized", False),
                "special": entry.get("special", True),
            }
        )
    try:
        spec["added_tokens"].sort(key=lambda entry: entry["id"])
        tok = Tokenizer.from_str(json.dumps(spec))
    except Exception as exc:  # tokenizers raises a bare Exception for a spec it cannot read
        raise CheckpointError(f"cannot read the text tokenizer in {folder} ({where}): {exc}") from None
    for entry in spec["added_tokens"]:
        loaded = tok.token_to_id(entry["content"])
        if loaded != entry["id"]:
            raise CheckpointError(
                f"{folder}: added token {entry['content']!r} is declared with id {entry['id']} but loads as "
                f"{loaded}: added tokens take the ids after the vocabulary, in order, with no gap or clash"
            )
    return tok


_TINY_CORPUS = (
    "assistant user system "
    "The quick brown fox jumps over the lazy dog. Hello there, this is a test of the voice. "
    "Good morning, everyone! How are you today? I am fine, thank you. "
    "Speech synthesis turns text into sound, one frame at a time. "
    "你好，世界。今天天气很好。我们一起去公园散步吧。 "
    "0123456789 , . ! ? ; : ' \" ( ) - "
)


def new_bpe() -> Tokenizer:
    """An empty byte-level BPE with Qwen2's normalizer and split regex, ready to train."""
    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix=""))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tok


def write_tiny_tokenizer(folder: str | Path, vocab_size: int = 512) -> None:
    """Write a small real byte-level BPE in the published file layout, specials at their real ids.

    The tiny checkpoint keeps it: its tests are tuned to its short token sequences (a few frames of
    text each), and the oracle tests compare against it. `<|im_start|>assistant\\n` is 3 tokens.
    """
    tok = new_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeating the role words makes each a single token, as in the real vocabulary.
    tok.train_from_iterator([_TINY_CORPUS] * 3 + ["assistant"] * 20 + ["user"] * 20, trainer=trainer)
    write_tokenizer(folder, tok)


def write_tokenizer(folder: str | Path, tok: Tokenizer) -> None:
    """Write a trained BPE (of `new_bpe`) as Qwen publishes its tokenizer: vocab.json, merges.txt
    and tokenizer_config.json, the special tokens at their released ids.

    The learned vocabulary is padded with unreachable filler entries up to the released size,
    so the special tokens keep their real ids.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    if "assistant" not in vocab:
        raise RuntimeError("the trained tokenizer lacks the 'assistant' token the prompt needs")
    if len(vocab) > BPE_VOCAB_SIZE:
        raise RuntimeError(f"the trained tokenizer has {len(vocab)} entries, more than {BPE_VOCAB_SIZE}")
    # No merge builds these, so BPE never emits them.
    vocab.update({f"<|unused_{i}|>": i for i in range(len(vocab), BPE_VOCAB_SIZE)})
    with open(folder / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(folder / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": not content.startswith(("<tool", "</tool", "<think", "</think")),
            }
            for i, content in SPECIAL_TOKENS.items()
        },
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)


@functools.lru_cache(maxsize=4)
def cached_tokenizer(folder: str) -> TextTokenizer:
    """The checkpoint's tokenizer, loaded once per process (about a second for a real checkpoint)
    for the server's own uses beside the engine: word timing and speech usage counts."""
    return TextTokenizer.from_folder(folder)
