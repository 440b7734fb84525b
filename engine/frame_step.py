"""The per-frame work for every stream slot at once: code predictor, talker step, next code 0.

`FrameStepper` owns the static state of S stream slots (KV caches, last hidden state, pending
code 0, repetition-penalty history, per-slot sampling settings and RNGs), allocated once. A step
runs over the rows [0, n) with fixed shapes; rows not in `active` compute but change nothing that
matters (their KV write lands at their own next position, or the last one, rewritten before read).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from voicewire.engine.sampling import RowSampling, SamplingParams, apply_repetition_penalty, mask_ids, sample
from voicewire.engine.talker import Talker

MIN_FRAMES = 2  # the official generate never ends before two frames


@dataclass(frozen=True)
class GenerationOptions:
    """One stream's decoding settings."""

    talker: SamplingParams = field(default_factory=SamplingParams)
    predictor: SamplingParams = field(default_factory=SamplingParams)
    repetition_penalty: float = 1.05  # talker codebook 0 only
    suppress_eos: bool = False  # force frames until a cap (benchmarks, comparisons)

    @classmethod
    def from_generation_config(
        cls,
        gen: dict,
        greedy: bool = False,
        suppress_eos: bool = False,
        talker: SamplingParams | None = None,
        predictor: SamplingParams | None = None,
        repetition_penalty: float | None = None,
    ) -> GenerationOptions:
        """The checkpoint's generation_config.json defaults, with the given overrides."""
        talker = talker or SamplingParams(
            do_sample=gen.get("do_sample", True),
            temperature=gen.get("temperature", 0.9),
            top_k=gen.get("top_k", 50),
            top_p=gen.get("top_p", 1.0),
        )
        predictor = predictor or SamplingParams(
            do_sample=gen.get("subtalker_dosample", True),
            temperature=gen.get("subtalker_temperature", 0.9),
            top_k=gen.get("subtalker_top_k", 50),
            top_p=gen.get("subtalker_top_p", 1.0),
        )
        if greedy:
            talker = SamplingParams(False, talker.temperature, talker.top_k, talker.top_p)
            predictor = SamplingParams(False, predictor.temperature, predictor.top_k, predictor.top_p)
        penalty = gen.get("repetition_penalty", 1.05) if repetition_penalty is None else repetition_penalty
        if penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
        return cls(talker, predictor, float(penalty), suppress_eos)

    @property
    def samples(self) -> bool:
        return self.talker.do_sample or self.predictor.do_sample


class FrameStepper:
    """Talker + code predictor state for `slots` stream rows, allocated once."""

    def __init__(self, talker: Talker, slots: int, kv_length: int) -> None:
        cfg = talker.cfg
        self.talker = talker
        device = talker.codec_head.weight.device
        dtype = talker.codec_head.weight.dtype
        self.slots = slots
        self.kv_length = kv_length
        self.cache = talker.model.new_cache(slots, kv_length)
        self.predictor_cache = talker.code_predictor.model.new_cache(
            slots, talker.code_predictor.cache_length
        )
        self.hidden = torch.zeros(slots, cfg.decoder.hidden_size, device=device, dtype=dtype)
        self.code0 = torch.zeros(slots, dtype=torch.long, device=device)
        self.pos = torch.zeros(slots, dtype=torch.long, device=device)
        self.frames_done = torch.zeros(slots, dtype=torch.long, device=device)
        self.seen = torch.zeros(slots, cfg.vocab_size, dtype=torch.bool, device=device)
        self.penalty = torch.ones(slots, device=device)
        self.suppress_eos = torch.zeros(slots, dtype=torch.bool, device=device)
        self.talker_sampling = RowSampling.allocate(slots, device)
        self.predictor_sampling = RowSampling.allocate(slots, device)
        self.generators: list[torch.Generator | None] = [None] * slots
        # Control ids (top 1024 of the codec vocab) never start a frame, except EOS when allowed.
        self.banned = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=device)
        self.banned[cfg.vocab_size - 1024 :] = True
        self.banned[cfg.codec_eos_id] = False
        self.eos_only = torch.zeros_like(self.banned)
        self.eos_only[cfg.codec_eos_id] = True
        self.device = device

    def configure(self, slot: int, options: GenerationOptions, generator: torch.Generator | None) -> None:
        """Give `slot` a stream's settings and RNG."""
        self.talker_sampling.set(slot, options.talker)
        self.predictor_sampling.set(slot, options.predictor)
        self.penalty[slot] = options.repetition_penalty
        self.suppress_eos[slot] = options.suppress_eos
        self.generators[slot] = generator

    def _first_code(self, logits: Tensor, lo: int, hi: int, active: Tensor, gens: list) -> Tensor:
        """Codebook-0 logits [n, V] of rows [lo, hi) -> code 0 [n], with penalty, suppression, min length."""
        logits = apply_repetition_penalty(logits, self.seen[lo:hi], self.penalty[lo:hi])
        logits = mask_ids(logits, self.banned)
        no_eos = self.suppress_eos[lo:hi] | (self.frames_done[lo:hi] < MIN_FRAMES)
        logits = mask_ids(logits, self.eos_only & no_eos[:, None])
        code0 = sample(logits, self.talker_sampling.rows(lo, hi, active), gens)
        index = code0[:, None]
        seen = self.seen[lo:hi]
        seen.scatter_(1, index, seen.gather(1, index) | active[:, None])
        return code0

    def prefill(self, slot: int, rows: Tensor, start: int) -> None:
        """Run a new talker sequence's prompt rows [T, H] for `slot` at positions start.., and draw its
        first code 0. Positions below `start` keep their KV (the cached voice prefix)."""
        t = rows.shape[0]
        if start + t > self.kv_length:
            raise ValueError(f"prompt needs {start + t} positions, the KV cache holds {self.kv_length}")
        positions = torch.arange(start, start + t, device=self.device)[None]
        hidden, logits = self.talker(rows[None], positions, self.cache.rows(slot, slot + 1))
        self.hidden[slot] = hidden[0, -1]
        self.pos[slot] = start + t
        self.frames_done[slot] = 0
        self.seen[slot] = False
        active = torch.ones(1, dtype=torch.bool, device=self.device)
        self.code0[slot] = self._first_code(logits[:, -1], slot, slot + 1, active, [self.generators[slot]])[0]

    def step(self, n: int, active: list[bool], text_rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One frame for the active rows among [0, n), each fed its text-track row [n, H].

        Returns (frame codes [n, 16], next code 0 [n], finite [n] bool); inactive rows are garbage."""
        talker = self.talker
        mask = torch.tensor(active, dtype=torch.bool, device=self.device)
        gens = [g if a else None for g, a in zip(self.generators[:n], active, strict=True)]
        hidden, code0 = self.hidden[:n], self.code0[:n]
        residual = talker.code_predictor.predict(
            hidden,
            talker.embed_codec(code0),
            self.predictor_cache.rows(0, n),
            self.predictor_sampling.rows(0, n, mask),
            gens,
        )
        frame = torch.cat((code0[:, None], residual), dim=1)
        x = (talker.embed_frame(frame) + text_rows)[:, None]
        # A row that is not stepping may sit at kv_length (its sequence ended at the bound); its
        # throwaway write goes to the last slot instead, which nothing reads before rewriting.
        positions = self.pos[:n].clamp(max=self.kv_length - 1)
        new_hidden, logits = talker(x, positions[:, None], self.cache.rows(0, n))
        logits = logits[:, -1]
        finite = torch.isfinite(logits).all(dim=-1)
        self.hidden[:n] = torch.where(mask[:, None], new_hidden[:, -1], hidden)
        self.pos[:n] += mask
        self.frames_done[:n] += mask
        next_code0 = self._first_code(logits, 0, n, mask, gens)
        self.code0[:n] = torch.where(mask, next_code0, code0)
        return frame, next_code0, finite
