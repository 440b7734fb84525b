"""Token selection as the official generate applies it, as pure tensor functions with no host sync.

Order follows transformers' logits processors: repetition penalty, suppressed ids and the
minimum length (masking), then for sampling temperature, top-k, top-p, and a draw. Every row
(stream slot) has its own parameters. Draws use counter-based noise, a hash of the row's seed,
a draw counter and the token id, instead of a stateful RNG: a row's draws never depend on its
batch or device, and the whole draw is fixed-shape tensor work that a CUDA graph can capture.
"""

from __future__ import annotations

import random
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


def resolve_seed(seed: int | None) -> int:
    """A stream's noise seed: its own (folded to 63 bits), or a random one."""
    return random.getrandbits(63) if seed is None else seed & (2**63 - 1)


_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # spreads consecutive ids over the hash's input


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer finalizer (xor-shift, multiply) on uint32 values held in int64."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    return (x >> 16) ^ x


def uniform_noise(seed: Tensor, counter: Tensor, vocab: int) -> Tensor:
    """Uniform (0, 1) noise [B, V], a pure function of each row's seed [B], counter [B] and token id."""
    key = _mix32((seed & _MASK32) ^ _mix32(((seed >> 32) & _MASK32) ^ _mix32(counter & _MASK32)))
    ids = torch.arange(vocab, device=seed.device, dtype=torch.long)
    return unit_interval(_mix32((key[:, None] + ids * _GOLDEN) & _MASK32) >> 9)


def unit_interval(bits: Tensor) -> Tensor:
    """23-bit integers -> float32 strictly inside (0, 1). With 24 bits, (2**24 - 1) + 0.5 rounds up
    to 2**24 in float32: a noise of exactly 1, a zero exponential, and 0/0 for masked ids."""
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def sample(
    logits: Tensor, params: RowSampling, seed: Tensor, counter: Tensor, any_sampling: bool = True
) -> Tensor:
    """logits [B, V] -> ids [B]. Rows with do_sample draw with noise keyed by (seed, counter) [B];
    the others take the argmax. `any_sampling=False` (a host-side hint) skips the draw entirely."""
    greedy = logits.argmax(dim=-1)
    if not any_sampling:
        return greedy
    probs = _filter(logits.float(), params).softmax(dim=-1)
    # Exponential race: argmax of p / E with E ~ Exp(1) is a draw from p.
    race = probs / -torch.log(uniform_noise(seed, counter, probs.shape[-1]))
    return torch.where(params.do_sample, race.argmax(dim=-1), greedy)
