"""A checkpoint's tensors: reading its safetensors files and loading them into modules by
explicit name (engine/model/checkpoint.py finds the folder and reads its JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.model.layers import StackedLinear, weight_parts

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


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
