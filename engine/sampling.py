"""Token selection as the official generate applies it, as pure tensor functions with no host sync.

Order follows transformers' logits processors: repetition penalty, suppressed ids and the
minimum length (masking), then for sampling temperature, top-k, top-p, and a draw. Every row
(stream slot) has its own parameters and its own RNG, so a row's draws never depend on its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    """One stream's sampling settings."""

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


@dataclass
class RowSampling:
    """Sampling settings per batch row, as tensors [B], allocated once and written per slot."""

    do_sample: Tensor  # bool
    temperature: Tensor  # float32
    top_k: Tensor  # int64, 0 = off
    top_p: Tensor  # float32

    @classmethod
    def allocate(cls, batch: int, device: torch.device | str) -> RowSampling:
        return cls(
            torch.zeros(batch, dtype=torch.bool, device=device),
            torch.ones(batch, dtype=torch.float32, device=device),
            torch.zeros(batch, dtype=torch.long, device=device),
            torch.ones(batch, dtype=torch.float32, device=device),
        )

    @classmethod
    def uniform(cls, params: SamplingParams, batch: int, device: torch.device | str = "cpu") -> RowSampling:
        rows = cls.allocate(batch, device)
        for b in range(batch):
            rows.set(b, params)
        return rows

    def set(self, row: int, params: SamplingParams) -> None:
        self.do_sample[row] = params.do_sample
        self.temperature[row] = params.temperature
        self.top_k[row] = params.top_k
        self.top_p[row] = params.top_p

    def rows(self, start: int, stop: int, active: Tensor | None = None) -> RowSampling:
        """Rows [start, stop); rows where `active` is False become greedy (they draw nothing)."""
        do_sample = self.do_sample[start:stop]
        if active is not None:
            do_sample = do_sample & active
        return RowSampling(
            do_sample, self.temperature[start:stop], self.top_k[start:stop], self.top_p[start:stop]
        )


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: Tensor | float) -> Tensor:
    """Penalize ids already generated (seen [B, V] bool): negative scores * p, positive / p.

    `penalty` is a float or a per-row tensor [B]."""
    if isinstance(penalty, Tensor):
        penalty = penalty[:, None].to(logits.dtype)
    elif penalty == 1.0:
        return logits
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def mask_ids(logits: Tensor, banned: Tensor) -> Tensor:
    """banned [V] or [B, V] bool -> those ids get -inf."""
    return logits.masked_fill(banned, float("-inf"))


def _filter(logits: Tensor, params: RowSampling) -> Tensor:
    """Temperature, then top-k and top-p per row; logits [B, V] float32."""
    vocab = logits.shape[-1]
    logits = logits / params.temperature[:, None]
    k = torch.where(params.top_k > 0, params.top_k.clamp(max=vocab), vocab)
    ranked = torch.sort(logits, dim=-1, descending=True).values
    kth = ranked.gather(1, (k - 1)[:, None])
    logits = logits.masked_fill(logits < kth, float("-inf"))
    # top-p: drop the least likely ids whose total mass stays within 1 - p; keep the best always.
    sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = (cumulative <= (1 - params.top_p)[:, None]) & (params.top_p < 1.0)[:, None]
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def sample(logits: Tensor, params: RowSampling, generators: list[torch.Generator | None]) -> Tensor:
    """logits [B, V] -> ids [B]. Row b draws from generators[b] where do_sample[b] and it has one;
    every other row takes the argmax. The caller gives sampling rows their generators."""
    greedy = logits.argmax(dim=-1)
    if all(g is None for g in generators):
        return greedy
    probs = _filter(logits.float(), params).softmax(dim=-1)
    # Exponential race (argmax of p / E, E ~ Exp(1)) is a categorical draw; each row uses its own RNG.
    noise = torch.stack(
        [
            torch.empty(probs.shape[-1], device=probs.device).exponential_(generator=g)
            if g is not None
            else torch.ones(probs.shape[-1], device=probs.device)
            for g, _ in zip(generators, range(probs.shape[0]), strict=True)
        ]
    )
    return torch.where(params.do_sample, (probs / noise).argmax(dim=-1), greedy)
