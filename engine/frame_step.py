"""The per-frame work for every stream slot at once: code predictor, talker step, next code 0.

`FrameStepper` owns the static state of S stream slots (KV caches, last hidden state, pending
code 0, repetition-penalty history, per-slot sampling settings and seeds), allocated once. A step
runs over the rows [0, b) with fixed shapes, b being n rounded up to a batch bucket; rows not
active compute but change nothing that matters (their KV write lands at their own next position,
or the last one, rewritten before read). On CUDA each bucket's step is one captured CUDA graph:
inputs and outputs live in static buffers, and a step costs one small copy in and one out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch import Tensor

from voicewire.engine import cuda_graphs
from voicewire.engine.sampling import (
    Draw,
    RowSampling,
    SamplingParams,
    apply_repetition_penalty,
    mask_ids,
    resolve_seed,
    sample,
)
from voicewire.engine.talker import Talker, TalkerConfig

log = logging.getLogger(__name__)

MIN_FRAMES = 2  # the official generate never ends before two frames
# Batch sizes a step is padded to (then capped by the slot count); one CUDA graph each.
BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


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
    def draw(self) -> Draw:
        return Draw.needed((self.talker, self.predictor))


def banned_ids(cfg: TalkerConfig, device: torch.device | str) -> tuple[Tensor, Tensor]:
    """(banned [V], eos_only [V]): control ids (the top 1024 of the codec vocab) never start a frame,
    except EOS when allowed; eos_only masks EOS alone."""
    banned = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=device)
    banned[cfg.vocab_size - 1024 :] = True
    banned[cfg.codec_eos_id] = False
    eos_only = torch.zeros_like(banned)
    eos_only[cfg.codec_eos_id] = True
    return banned, eos_only


def choose_code0(
    logits: Tensor,
    seen: Tensor,
    penalty: Tensor,
    banned: Tensor,
    no_eos: Tensor,
    params: RowSampling,
    seed: Tensor,
    counter: Tensor,
    draw: Draw,
) -> Tensor:
    """Codebook-0 logits [n, V] -> code 0 [n]: repetition penalty over the sequence's earlier codes
    (seen [n, V]), banned control ids, EOS masked where `no_eos` [n, V], then a greedy pick or a draw."""
    logits = apply_repetition_penalty(logits, seen, penalty)
    logits = mask_ids(logits, banned)
    logits = mask_ids(logits, no_eos)
    return sample(logits, params, seed, counter, draw)


class FrameStepper:
    """Talker + code predictor state for `slots` stream rows, allocated once.

    `graphs`: capture each bucket's step as a CUDA graph (CUDA only). `pad`: round batches up to
    the buckets even without graphs, so eager and graphed steps run the very same shapes.
    """

    def __init__(
        self, talker: Talker, slots: int, kv_length: int, graphs: bool = False, pad: bool = False
    ) -> None:
        cfg = talker.cfg
        self.talker = talker
        device = talker.codec_head.weight.device
        dtype = talker.codec_head.weight.dtype
        if graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the talker is on {device}")
        self.slots = slots
        self.kv_length = kv_length
        self.device = device
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
        # Noise keys: draw round r of a slot uses counters (r << 4) | codebook.
        self.seed = torch.zeros(slots, dtype=torch.long, device=device)
        self.rounds = torch.zeros(slots, dtype=torch.long, device=device)
        self.draws = [Draw.GREEDY] * slots  # host copy: what each slot's draws need
        self.banned, self.eos_only = banned_ids(cfg, device)
        # Static step buffers: inputs [S, 2] (active, text id), outputs [S, 18] (16 codes, next code 0, finite).
        self.inputs = torch.zeros(slots, 2, dtype=torch.long, device=device)
        self.outputs = torch.zeros(slots, cfg.num_code_groups + 2, dtype=torch.long, device=device)
        self._host_inputs = torch.zeros(slots, 2, dtype=torch.long, pin_memory=device.type == "cuda")
        self.buckets = sorted({min(b, slots) for b in BUCKETS}) if graphs or pad else None
        # One graph per (bucket, draw): TOP_K serves greedy slots too, FULL serves every slot.
        self._graphs: dict[tuple[int, Draw], torch.cuda.CUDAGraph] | None = {} if graphs else None
        self._pool = None

    def configure(self, slot: int, options: GenerationOptions, seed: int | None) -> None:
        """Give `slot` a stream's settings and noise seed (None: a random one)."""
        self.talker_sampling.set(slot, options.talker)
        self.predictor_sampling.set(slot, options.predictor)
        self.penalty[slot] = options.repetition_penalty
        self.suppress_eos[slot] = options.suppress_eos
        self.seed[slot] = resolve_seed(seed)
        self.rounds[slot] = 0
        self.draws[slot] = options.draw

    def _first_code(self, logits: Tensor, lo: int, hi: int, active: Tensor, draw: Draw) -> Tensor:
        """Codebook-0 logits [n, V] of rows [lo, hi) -> code 0 [n], with penalty, suppression, min length."""
        no_eos = self.suppress_eos[lo:hi] | (self.frames_done[lo:hi] < MIN_FRAMES)
        code0 = choose_code0(
            logits,
            self.seen[lo:hi],
            self.penalty[lo:hi],
            self.banned,
            self.eos_only & no_eos[:, None],
            self.talker_sampling.rows(lo, hi, active),
            self.seed[lo:hi],
            self.rounds[lo:hi] << 4,
            draw,
        )
        self.rounds[lo:hi] += active
        index = code0[:, None]
        seen = self.seen[lo:hi]
        seen.scatter_(1, index, seen.gather(1, index) | active[:, None])
        return code0

    def check_prompt(self, start: int, length: int) -> None:
        """Raise ValueError unless `length` prompt rows from position `start` fit the KV cache."""
        if start + length > self.kv_length:
            raise ValueError(f"prompt needs {start + length} positions, the KV cache holds {self.kv_length}")

    def prefill(self, prompts: list[tuple[int, Tensor, int]]) -> None:
        """Start new talker sequences, each (slot, prompt rows [T, H], start position), in one batched
        call, and draw their first code 0. Positions below a prompt's start keep their KV (the cached
        voice prefix). The call spans the slot range of the prompts, padded to the longest one: other
        slots in the range, and the padding, write only at positions past their own next one (or the
        last, clamped), which nothing reads before rewriting."""
        for _, rows, start in prompts:
            self.check_prompt(start, rows.shape[0])
        lo = min(slot for slot, _, _ in prompts)
        hi = max(slot for slot, _, _ in prompts) + 1
        longest = max(rows.shape[0] for _, rows, _ in prompts)
        dtype = self.hidden.dtype
        x = torch.zeros(hi - lo, longest, self.hidden.shape[1], device=self.device, dtype=dtype)
        active = torch.zeros(hi - lo, dtype=torch.bool)
        starts = torch.zeros(hi - lo, dtype=torch.long)
        lengths = torch.ones(hi - lo, dtype=torch.long)
        for slot, rows, start in prompts:
            x[slot - lo, : rows.shape[0]] = rows
            active[slot - lo], starts[slot - lo], lengths[slot - lo] = True, start, rows.shape[0]
        active, starts, lengths = (t.to(self.device) for t in (active, starts, lengths))
        first = torch.where(active, starts, self.pos[lo:hi])
        positions = (first[:, None] + torch.arange(longest, device=self.device)).clamp(max=self.kv_length - 1)
        hidden, logits = self.talker(x, positions, self.cache.rows(lo, hi))
        last = torch.arange(hi - lo, device=self.device), lengths - 1
        self.hidden[lo:hi] = torch.where(active[:, None], hidden[last], self.hidden[lo:hi])
        self.pos[lo:hi] = torch.where(active, starts + lengths, self.pos[lo:hi])
        self.frames_done[lo:hi].masked_fill_(active, 0)
        self.seen[lo:hi].masked_fill_(active[:, None], False)
        draw = max(self.draws[slot] for slot, _, _ in prompts)
        code0 = self._first_code(logits[last], lo, hi, active, draw)
        self.code0[lo:hi] = torch.where(active, code0, self.code0[lo:hi])

    def step(self, n: int, active: list[bool], text_ids: list[int]) -> Tensor:
        """One frame for the active rows among [0, n), each fed its text-track id.

        Returns [n, 18] on the device: the frame's 16 codes, the next code 0, and whether the
        row's logits were finite; inactive rows are garbage."""
        b = n if self.buckets is None else next(b for b in self.buckets if b >= n)
        host = self._host_inputs
        host[:b] = 0
        host[:n, 0] = torch.tensor(active, dtype=torch.long)
        host[:n, 1] = torch.tensor(text_ids, dtype=torch.long)
        self.inputs[:b].copy_(host[:b], non_blocking=True)
        draw = max((d for a, d in zip(active, self.draws, strict=False) if a), default=Draw.GREEDY)
        if self._graphs is not None:
            self._graph(b, max(draw, Draw.TOP_K)).replay()
        else:
            self._compute(b, draw)
        return self.outputs[:n]

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every (bucket, draw) graph now (largest first, sharing one memory pool)."""
        assert self._graphs is not None and self.buckets is not None
        for b in reversed(self.buckets):
            for draw in (Draw.TOP_K, Draw.FULL):
                self._graph(b, draw)

    def _graph(self, b: int, draw: Draw) -> torch.cuda.CUDAGraph:
        graph = self._graphs.get((b, draw)) if self._graphs is not None else None
        if graph is not None:
            return graph
        assert self._graphs is not None
        # With every row inactive, the warm-up runs change nothing that is read.
        saved = self.inputs[:b].clone()
        self.inputs[:b] = 0
        graph = cuda_graphs.capture(lambda: self._compute(b, draw), self.device, self._pool)
        self._pool = graph.pool()
        self._graphs[(b, draw)] = graph
        self.inputs[:b] = saved
        log.debug("captured the frame step for batch %d, %s draws", b, draw.name)
        return graph

    def _compute(self, b: int, draw: Draw) -> None:
        """The step over rows [0, b), from `inputs` to `outputs` and the slot state: fixed shapes,
        no host sync, so it can be captured."""
        talker = self.talker
        mask = self.inputs[:b, 0] != 0
        text_rows = talker.embed_text(self.inputs[:b, 1])
        hidden, code0 = self.hidden[:b], self.code0[:b]
        residual = talker.code_predictor.predict(
            hidden,
            talker.embed_codec(code0),
            self.predictor_cache.rows(0, b),
            self.predictor_sampling.rows(0, b, mask),
            self.seed[:b],
            self.rounds[:b] << 4,
            draw,
        )
        frame = torch.cat((code0[:, None], residual), dim=1)
        x = (talker.embed_frame(frame) + text_rows)[:, None]
        # A row that is not stepping may sit at kv_length (its sequence ended at the bound); its
        # throwaway write goes to the last slot instead, which nothing reads before rewriting.
        positions = self.pos[:b].clamp(max=self.kv_length - 1)
        new_hidden, logits = talker(x, positions[:, None], self.cache.rows(0, b))
        logits = logits[:, -1]
        self.outputs[:b, -1] = torch.isfinite(logits).all(dim=-1)
        self.hidden[:b] = torch.where(mask[:, None], new_hidden[:, -1], hidden)
        self.pos[:b] += mask
        self.frames_done[:b] += mask
        next_code0 = self._first_code(logits, 0, b, mask, draw)
        self.code0[:b] = torch.where(mask, next_code0, code0)
        self.outputs[:b, : frame.shape[1]] = frame
        self.outputs[:b, -2] = next_code0
