"""Finding a checkpoint folder and loading its tensors into modules by explicit name.

A checkpoint is a folder laid out as Qwen publishes it:
config.json, generation_config.json, model.safetensors, tokenizer files, speech_tokenizer/.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from voicewire.engine.model.layers import StackedLinear, weight_parts

log = logging.getLogger(__name__)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

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


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


def parse_device(name: str | torch.device) -> torch.device:
    device = torch.device(name)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {name!r}; allowed: cpu, cuda, cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but CUDA is not available on this machine")
    return device


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


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"missing weights file {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: f.get_tensor(name) for name in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise CheckpointError(f"cannot read {path}: {exc}") from exc


def take_prefix(tensors: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under `prefix.`, with the prefix stripped."""
    dotted = prefix + "."
    return {name[len(dotted) :]: t for name, t in tensors.items() if name.startswith(dotted)}


def load_into(module: nn.Module, tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """Copy checkpoint tensors into `module`'s parameters and buffers, matched by name.

    Every parameter must be present with the right shape, and every tensor must be used;
    `where` names the file and prefix for the error message.
    """
    targets = checkpoint_tensors(module)
    missing = sorted(set(targets) - set(tensors))
    unexpected = sorted(set(tensors) - set(targets))
    wrong_shape = [
        f"{n}: checkpoint {tuple(tensors[n].shape)} vs model {tuple(targets[n].shape)}"
        for n in sorted(set(targets) & set(tensors))
        if tensors[n].shape != targets[n].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {_listing(unexpected)}")
    if wrong_shape:
        problems.append(f"wrong shape for {len(wrong_shape)} tensor(s): {_listing(wrong_shape)}")
    if problems:
        raise CheckpointError(f"weights in {where} do not match the model: " + "; ".join(problems))
    with torch.no_grad():
        for name, target in targets.items():
            target.copy_(tensors[name])
    # Inference weights: nothing that writes a model output into a state buffer may drag autograd along.
    module.requires_grad_(False)


def checkpoint_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """`module`'s parameters and persistent buffers under their checkpoint names. A `StackedLinear`
    weight appears as its parts (views into it), so loading into them fills it, and saving them
    writes the published layout."""
    persistent = module.state_dict(keep_vars=True).keys()
    tensors = dict(module.named_parameters())
    tensors.update({n: b for n, b in module.named_buffers() if n in persistent})
    for name, sub in module.named_modules():
        if isinstance(sub, StackedLinear):
            # Views made without autograd may be written in place (split's views may not otherwise).
            with torch.no_grad():
                parts = weight_parts(sub)
            del tensors[f"{name}.weight"]
            parent = name.rpartition(".")[0]
            for part, rows in zip(sub.parts, parts, strict=True):
                tensors[f"{parent}.{part}.weight" if parent else f"{part}.weight"] = rows
    return tensors


def _listing(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


def save_tensors(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({n: t.detach().contiguous() for n, t in tensors.items()}, str(path), metadata={"format": "pt"})


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
