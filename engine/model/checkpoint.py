"""A checkpoint folder, as Qwen publishes it: config.json, generation_config.json,
model.safetensors, the text tokenizer's files, speech_tokenizer/. Finding one, reading and writing
its JSON, and the error of a folder that does not hold what the model needs.

No tensors here (engine/model/weights.py loads them), so a process that reads a checkpoint's
tokenizer or configuration does not load PyTorch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Files a Qwen3-TTS checkpoint must hold; speech_tokenizer/ is the codec.
REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "speech_tokenizer/config.json",
    "speech_tokenizer/model.safetensors",
)
# The text tokenizer comes in either of two forms, and a checkpoint holds at least one: the fast
# tokenizer's one file, which `save_pretrained` writes and many mirrors and fine-tunes ship, or the
# vocabulary and merges Qwen publishes, with the special tokens in tokenizer_config.json.
TOKENIZER_FORMS = (("tokenizer.json",), ("vocab.json", "merges.txt", "tokenizer_config.json"))


def tokenizer_forms_text() -> str:
    """The forms as a reader sees them: `tokenizer.json, or vocab.json + merges.txt + ...`."""
    return ", or ".join(" + ".join(form) for form in TOKENIZER_FORMS)


class CheckpointError(Exception):
    """A checkpoint is missing, incomplete or does not match the model."""


def resolve_model_dir(path_or_id: str | Path) -> Path:
    """A local folder as is, else a Hugging Face repo id (`Qwen3TTS.load` takes `tiny` too)."""
    local = Path(path_or_id).expanduser()
    if local.is_dir():
        _check_layout(local)
        return local
    if local.exists() or str(path_or_id).startswith((".", "/", "~")) or str(path_or_id).count("/") != 1:
        raise CheckpointError(
            f"{path_or_id!r} is neither a checkpoint folder nor a Hugging Face repo id (owner/name)"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id=str(path_or_id)))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise CheckpointError(
            f"could not get {path_or_id!r} from the Hugging Face hub or its local cache "
            f"(looked for {', '.join(REQUIRED_FILES)}, and a text tokenizer: {tokenizer_forms_text()}): "
            f"{exc}. Pass a local folder with --model PATH, "
            "or --model tiny for the built-in random checkpoint."
        ) from exc
    _check_layout(folder)
    return folder


def _check_layout(folder: Path) -> None:
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if not any(all((folder / name).is_file() for name in form) for form in TOKENIZER_FORMS):
        missing.append(f"a text tokenizer ({tokenizer_forms_text()})")
    if missing:
        raise CheckpointError(f"checkpoint folder {folder} is missing: {', '.join(missing)}")


def read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise CheckpointError(f"missing file {path}") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
