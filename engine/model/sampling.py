"""Token selection as the official generate applies it, as pure tensor functions with no host sync.

Order follows transformers' logits processors: repetition penalty, suppressed ids and the
minimum length (masking), then for sampling temperature, top-k, top-p, and a draw. Every row
(stream slot) has its own parameters. Draws use counter-based noise, a hash of the row's seed,
a draw counter and the token id, instead of a stateful RNG: a row's draws never depend on its
batch or device, and the whole draw is fixed-shape tensor work that a CUDA graph can capture.

A draw is a race: the argmax of filtered logit / temperature + Gumbel noise of the id's uniform.
Only the kept ids can win, so when every sampling row keeps at most `TOP_K_CAP` ids (the
checkpoints' default top-k is 50), the race runs over the `TOP_K_CAP` best ids alone
(`Draw.TOP_K`): one top-k instead of two sorts of the vocabulary, with the same noise per id.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from voicewire.engine.config import SamplingParams
from voicewire.engine.kernels import pointwise

TOP_K_CAP = 64  # a draw among at most this many ids skips sorting the whole vocabulary


class Draw(enum.IntEnum):
    """How much of the vocabulary a batch's draw must look at (a host-side choice; larger covers less)."""

    GREEDY = 0  # no row samples: argmax only
    TOP_K = 1  # every sampling row keeps at most TOP_K_CAP ids
    FULL = 2  # some row samples with top-k off or above the cap

    @classmethod
    def needed(cls, params: Iterable[SamplingParams]) -> Draw:
        """The draw that serves every one of `params`."""
        draw = cls.GREEDY
        for p in params:
            if p.do_sample:
                draw = max(draw, cls.TOP_K if 0 < p.top_k <= TOP_K_CAP else cls.FULL)
        return draw


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

    def assign(self, rows: Tensor, values: RowSampling) -> None:
        """Write `values` (one entry per row) into the given rows [n], on the device, without a sync."""
        self.do_sample.index_copy_(0, rows, values.do_sample)
        self.temperature.index_copy_(0, rows, values.temperature)
        self.top_k.index_copy_(0, rows, values.top_k)
        self.top_p.index_copy_(0, rows, values.top_p)

    def select(self, rows: Tensor | int, active: Tensor | None = None) -> RowSampling:
        """The given rows [n], or the first `rows` (views: no gathers); those where `active` is
        False become greedy (they draw nothing)."""
        pick = slice(rows) if isinstance(rows, int) else rows
        do_sample = self.do_sample[pick]
        if active is not None:
            do_sample = do_sample & active
        return RowSampling(do_sample, self.temperature[pick], self.top_k[pick], self.top_p[pick])


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
    """Temperature, then top-k and top-p per row over the whole vocabulary; logits [B, V] float32."""
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


def _filter_best(logits: Tensor, params: RowSampling) -> tuple[Tensor, Tensor]:
    """The same filter over the TOP_K_CAP best ids: (filtered logits [B, C], their ids [B, C]).
    Valid for rows with 0 < top_k <= TOP_K_CAP; ties with the k-th logit stay in, as above."""
    best, ids = logits.topk(min(TOP_K_CAP, logits.shape[-1]), dim=-1)  # sorted, best first
    best = best / params.temperature[:, None]
    k = params.top_k.clamp(1, best.shape[-1])
    best = best.masked_fill(best < best.gather(1, (k - 1)[:, None]), float("-inf"))
    # top-p from the best down: drop an id once the ids before it hold p of the mass. A softmax
    # written out (the first id is the largest): compiled, torch.softmax over this symbolic width
    # is lowered as a split reduction with a warning.
    probs = (best - best[:, :1]).exp()
    probs = probs / probs.sum(dim=-1, keepdim=True)
    before = probs.cumsum(dim=-1) - probs
    remove = (before >= params.top_p[:, None]) & (params.top_p < 1.0)[:, None]
    return best.masked_fill(remove, float("-inf")), ids


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


def noise_key(seed: Tensor, counter: Tensor) -> Tensor:
    """The noise key of each (seed, counter) pair (elementwise, any shape): a draw's noise is a
    hash of its key and the token id."""
    return _mix32((seed & _MASK32) ^ _mix32(((seed >> 32) & _MASK32) ^ _mix32(counter & _MASK32)))


def uniform_noise(seed: Tensor, counter: Tensor, ids: Tensor | int) -> Tensor:
    """Uniform (0, 1) noise, a pure function of each row's seed [B], counter [B] and token id:
    for ids [B, C] -> [B, C], or for all ids below an int V -> [B, V]."""
    return keyed_noise(noise_key(seed, counter), ids)


def keyed_noise(key: Tensor, ids: Tensor | int) -> Tensor:
    """`uniform_noise` from the rows' noise keys [B]."""
    if isinstance(ids, int):
        ids = torch.arange(ids, device=key.device, dtype=torch.long)[None]
    return unit_interval(_mix32((key[:, None] + ids * _GOLDEN) & _MASK32) >> 9)


def unit_interval(bits: Tensor) -> Tensor:
    """23-bit integers -> float32 strictly inside (0, 1). With 24 bits, (2**24 - 1) + 0.5 rounds up
    to 2**24 in float32: a noise of exactly 1, a zero exponential, and 0/0 for masked ids."""
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 23))


@torch.compiler.disable
def _filter_all(logits: Tensor, params: RowSampling, key: Tensor) -> tuple[Tensor, Tensor]:
    """The full draw's filtered logits and noise over the whole vocabulary [B, V]. Eager even
    when `sample` runs compiled: the full draw is rare (top-k off or above the cap), inductor
    turns its id range into int32 index arithmetic where the hash's 32-bit constants overflow,
    and it splits the vocabulary softmax."""
    return _filter(logits, params), keyed_noise(key, logits.shape[-1])


@pointwise.fusable
def sample(
    logits: Tensor, params: RowSampling, seed: Tensor, counter: Tensor, draw: Draw = Draw.FULL
) -> Tensor:
    """logits [B, V] -> ids [B]. Rows with do_sample draw with noise keyed by (seed, counter) [B];
    the others take the argmax. `draw` (chosen on the host, see `Draw`) bounds what is looked at."""
    if draw == Draw.GREEDY:
        return logits.argmax(dim=-1)
    return sample_keyed(logits, params, noise_key(seed, counter), draw)


@pointwise.fusable
def sample_keyed(logits: Tensor, params: RowSampling, key: Tensor, draw: Draw = Draw.FULL) -> Tensor:
    """`sample` with the rows' noise keys [B] (`noise_key`) made beforehand: a caller that draws
    several times per step makes all its keys in one pass."""
    greedy = logits.argmax(dim=-1)
    if draw == Draw.GREEDY:
        return greedy
    if draw == Draw.TOP_K:
        filtered, ids = _filter_best(logits.float(), params)
        noise = keyed_noise(key, ids)
    else:
        filtered, noise = _filter_all(logits.float(), params, key)
    # Gumbel race: argmax of log p + G, G = -log(-log U), is a draw from p.
    race = filtered - torch.log(-torch.log(noise))
    won = race.argmax(dim=-1)
    if draw == Draw.TOP_K:
        won = ids.gather(1, won[:, None])[:, 0]
    return torch.where(params.do_sample, won, greedy)
