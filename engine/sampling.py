"""Token selection as the official generate applies it, as pure tensor functions with no host sync.

Order follows transformers' logits processors: repetition penalty, suppressed ids and the
minimum length (masking), then for sampling temperature, top-k, top-p, and a draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """Penalize ids already generated (seen [B, V] bool): negative scores * p, positive / p."""
    if penalty == 1.0:
        return logits
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def mask_ids(logits: Tensor, banned: Tensor) -> Tensor:
    """banned [V] or [B, V] bool -> those ids get -inf."""
    return logits.masked_fill(banned, float("-inf"))


def _filter(logits: Tensor, params: SamplingParams) -> Tensor:
    if params.temperature != 1.0:
        logits = logits / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= 1 - params.top_p
        remove[..., -1:] = False  # always keep the most likely id
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def sample(logits: Tensor, params: SamplingParams, generators: list[torch.Generator | None]) -> Tensor:
    """logits [B, V] -> ids [B]; greedy when not do_sample. Row b draws from generators[b]."""
    if not params.do_sample:
        return logits.argmax(dim=-1)
    probs = _filter(logits.float(), params).softmax(dim=-1)
    # Exponential race (argmax of p / E, E ~ Exp(1)) is a categorical draw; each row uses its own RNG.
    noise = torch.stack(
        [
            torch.empty(probs.shape[-1], device=probs.device).exponential_(generator=g)
            for g, _ in zip(generators, range(probs.shape[0]), strict=True)
        ]
    )
    return (probs / noise).argmax(dim=-1)
