"""The per-frame work for every stream slot at once: code predictor, talker step, next code 0.

`FrameStepper` owns the static state of S stream slots (KV caches, last hidden state, pending
code 0, repetition-penalty history, per-slot sampling settings and seeds), allocated once. A step
runs over the rows [0, b) with fixed shapes, b being n rounded up to a batch bucket; rows not
active compute but change nothing that matters (their KV write lands at their own next position,
or the last one, rewritten before read). On CUDA each bucket's step is one captured CUDA graph:
inputs and outputs live in static buffers, and a step costs one small copy in and one out.

Attention reads only the first `span` positions of each row's KV, the span being the smallest of
kv_length / 8, / 4, / 2 or kv_length that holds every occupied row of the batch: at 256 rows and
1024 positions, reading the whole cache costs more memory traffic than the weights. Rows that hold
no sequence clamp their throwaway write into the span.

A prefill starts new talker sequences in any slots: their rows go into a static buffer, padded to
a (batch, length) bucket, and the slots' KV rows are copied out, run, and written back at the
new positions only. Only the first `span` positions are copied out, the span being kv_length / 8
when every prompt of the call ends below it (a first sequence: the voice prefix and the first
text), else all of them: a burst of new streams then starts 64 to a call instead of 8, for an
eighth of the copying (at 1024 positions, a slot's KV is 112 MiB for the 0.6B talker). On CUDA
each bucket is a graph too, so a prefill costs a few launches rather than a few hundred eager ops
(about 45 ms of host time for the 0.6B talker).
"""

from __future__ import annotations

import functools
import logging
import time

import numpy as np
import torch
from torch import Tensor

from voicewire.engine.config import GenerationOptions
from voicewire.engine.kernels import cuda_graphs, pointwise
from voicewire.engine.model.sampling import (
    Draw,
    RowSampling,
    apply_repetition_penalty,
    mask_ids,
    resolve_seed,
    sample,
)
from voicewire.engine.model.talker import Talker, TalkerConfig

log = logging.getLogger(__name__)

MIN_FRAMES = 2  # the official generate never ends before two frames
# Batch sizes a step is padded to (then capped by the slot count); one CUDA graph each.
BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)
# Prefill buckets: sequences per call, and prompt rows (then capped by the KV length).
PREFILL_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PREFILL_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SPAN_DIVISORS = (8, 4, 2, 1)  # attention spans, as fractions of the KV length
# A prefill's spans: two, not four, since each span multiplies the prefill graphs (captured at start).
PREFILL_SPAN_DIVISORS = (8, 1)
PREFILL_KV_ROWS = 8192  # slots x span one prefill call copies out and back (memory bound)
# Page-locked step inputs kept in turn: with pipelined steps the host writes step k+1's inputs
# before step k's copy in has run, and a staging buffer is reused only once its copy has.
INPUT_STAGING = 4


def banned_ids(cfg: TalkerConfig, device: torch.device | str) -> tuple[Tensor, Tensor]:
    """(banned [V], eos_only [V]): control ids (the top 1024 of the codec vocab) never start a frame,
    except EOS when allowed; eos_only masks EOS alone."""
    banned = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=device)
    banned[cfg.vocab_size - 1024 :] = True
    banned[cfg.codec_eos_id] = False
    eos_only = torch.zeros_like(banned)
    eos_only[cfg.codec_eos_id] = True
    return banned, eos_only


@pointwise.fusable
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
    the buckets even without graphs, so eager and graphed steps run the very same shapes. The
    kernels are the talker's (`talker.kernels`, bound by the engine before any capture): with
    `fused_draw` every draw (code 0, then the code predictor's) runs engine.fused_draw's kernel.
    """

    def __init__(
        self,
        talker: Talker,
        slots: int,
        kv_length: int,
        graphs: bool = False,
        pad: bool = False,
        max_prefills: int = 32,
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
        self._staged: dict[int, tuple[GenerationOptions, int]] = {}  # configure() -> apply_settings()
        self.banned, self.eos_only = banned_ids(cfg, device)
        # Static step buffers: inputs [S, 2] (active, text id), outputs [S, 18] (16 codes, next code 0, finite).
        self.inputs = torch.zeros(slots, 2, dtype=torch.long, device=device)
        pin = device.type == "cuda"
        self._staging = [
            torch.zeros(slots, 2, dtype=torch.long, pin_memory=pin) for _ in range(INPUT_STAGING)
        ]
        self._staged_inputs = [staging.numpy() for staging in self._staging]
        self._copied = [torch.cuda.Event() for _ in range(INPUT_STAGING)] if pin else None
        self._turn = 0
        self.outputs = torch.zeros(slots, cfg.num_code_groups + 2, dtype=torch.long, device=device)
        self._slot_index = torch.arange(slots, device=device)
        self.buckets = sorted({min(b, slots) for b in BUCKETS}) if graphs or pad else None
        self.spans = sorted({max(1, kv_length // d) for d in SPAN_DIVISORS}) if graphs or pad else None
        # Host copies of each slot's next position and whether it holds a sequence: they pick the span.
        self._host_pos = np.zeros(slots, dtype=np.int64)
        self._occupied = np.zeros(slots, dtype=bool)
        # Prefill spans (eager and unpadded: the whole KV, as the official model attends), and the
        # most sequences one call starts at each: PREFILL_KV_ROWS // span, capped by max_prefills.
        self.prefill_spans = (
            sorted({max(1, kv_length // d) for d in PREFILL_SPAN_DIVISORS}) if graphs or pad else [kv_length]
        )
        self.prefill_batches = {
            span: max(1, min(max_prefills, PREFILL_KV_ROWS // span)) for span in self.prefill_spans
        }
        self.prefill_batch = max(self.prefill_batches.values())
        # Prefill buffers: prompt rows [P, kv_length, H] and (slot, start, length) per row [P, 3].
        self.prefill_rows = torch.zeros(
            self.prefill_batch, kv_length, cfg.decoder.hidden_size, device=device, dtype=dtype
        )
        self.prefill_meta = torch.zeros(self.prefill_batch, 3, dtype=torch.long, device=device)
        # Per span, the (batch, length) buckets: lengths up to the span, batches up to its cap.
        self.prefill_buckets = (
            {
                span: (
                    sorted({min(b, self.prefill_batches[span]) for b in PREFILL_BATCHES}),
                    sorted({min(t, span) for t in PREFILL_LENGTHS}),
                )
                for span in self.prefill_spans
            }
            if graphs or pad
            else None
        )
        self._prefill_graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}
        # One graph per (bucket, draw, span): TOP_K serves greedy slots too, FULL serves every slot.
        self._graphs: dict[tuple[int, Draw, int], torch.cuda.CUDAGraph] | None = {} if graphs else None
        self._capture = cuda_graphs.GraphCapture(device) if graphs else None

    def configure(self, slot: int, options: GenerationOptions, seed: int | None) -> None:
        """Give `slot` a stream's settings and noise seed (None: a random one). They are staged on
        the host and written, for every slot staged since, by the next prefill or step: writing
        each setting at once would be a scalar write, which waits for the step in flight."""
        self._staged[slot] = (options, resolve_seed(seed))
        self.draws[slot] = Draw.needed((options.talker, options.predictor))

    def apply_settings(self) -> None:
        """Write the staged slot settings to the device: one copy in for all of them, no sync."""
        if not self._staged:
            return
        ints, floats = [], []  # per staged slot, its settings in two dtypes
        for slot, (options, seed) in self._staged.items():
            t, p = options.talker, options.predictor
            ints.append((slot, t.do_sample, t.top_k, p.do_sample, p.top_k, options.suppress_eos, seed))
            floats.append((t.temperature, t.top_p, p.temperature, p.top_p, options.repetition_penalty))
        self._staged = {}
        ints, floats = torch.tensor(ints, dtype=torch.long), torch.tensor(floats, dtype=torch.float32)
        ints, floats = cuda_graphs.to_device(ints, self.device), cuda_graphs.to_device(floats, self.device)
        rows = ints[:, 0]
        self.talker_sampling.assign(
            rows, RowSampling(ints[:, 1] != 0, floats[:, 0], ints[:, 2], floats[:, 1])
        )
        self.predictor_sampling.assign(
            rows, RowSampling(ints[:, 3] != 0, floats[:, 2], ints[:, 4], floats[:, 3])
        )
        self.penalty.index_copy_(0, rows, floats[:, 4])
        self.suppress_eos.index_copy_(0, rows, ints[:, 5] != 0)
        self.seed.index_copy_(0, rows, ints[:, 6])
        self.rounds.index_fill_(0, rows, 0)

    def take_back(self, slot: int) -> None:
        """`slot`'s last step is discarded (it ran past EOS): return its noise round, so the next
        sequence draws as if that step never ran. The rest of its effects the next prefill resets."""
        self.rounds[slot] -= 1

    def release(self, slot: int) -> None:
        """`slot` holds no sequence any more: its position no longer widens the attention span."""
        self._occupied[slot] = False

    def _first_code(self, logits: Tensor, rows: Tensor | int, active: Tensor, draw: Draw) -> Tensor:
        """Codebook-0 logits [n, V] of slots `rows` [n] (a prefill's), or of the first `rows` slots
        (a step's: their state read as views, where gathers were some fifteen kernels a step) ->
        code 0 [n], with penalty, suppression and min length; a slot listed twice must come with
        equal logits (its writes then agree)."""
        pick = slice(rows) if isinstance(rows, int) else rows
        no_eos = self.suppress_eos[pick] | (self.frames_done[pick] < MIN_FRAMES)
        seen, penalty = self.seen[pick], self.penalty[pick]
        params, seed, counter = (
            self.talker_sampling.select(rows, active),
            self.seed[pick],
            self.rounds[pick] << 4,
        )
        kernels = self.talker.kernels
        if kernels.fused_draw:
            from voicewire.engine.kernels import fused_draw  # Triton, which CUDA builds of torch carry

            masks = fused_draw.Masks(seen, penalty, self.banned, no_eos, self.talker.cfg.codec_eos_id)
            code0, _ = fused_draw.draw(logits, params, seed, counter, masks=masks, pdl=kernels.pdl)
        else:
            no_eos = self.eos_only & no_eos[:, None]
            code0 = kernels.fuse(choose_code0)(
                logits, seen, penalty, self.banned, no_eos, params, seed, counter, draw
            )
        self.rounds[pick] += active
        self.seen[self._slot_index[pick] if isinstance(rows, int) else rows, code0] |= active
        return code0

    def clear(self, slot: int) -> None:
        """Zero `slot`'s KV rows and hidden state after it produced non-finite values. Attention
        reads a slot's whole cache under a mask, and 0 x NaN is NaN, so otherwise every later stream
        in the slot would fail too."""
        for cache in (self.cache, self.predictor_cache):
            cache.k[:, slot].zero_()
            cache.v[:, slot].zero_()
        self.hidden[slot].zero_()

    def check_prompt(self, start: int, length: int) -> None:
        """Raise ValueError unless `length` prompt rows from position `start` fit the KV cache."""
        if start + length > self.kv_length:
            raise ValueError(f"prompt needs {start + length} positions, the KV cache holds {self.kv_length}")

    def prefill(self, prompts: list[tuple[int, Tensor, int]]) -> None:
        """Start new talker sequences, each (slot, prompt rows [T, H], start position), and draw their
        first code 0. Positions below a prompt's start keep their KV (the cached voice prefix)."""
        for _, rows, start in prompts:
            self.check_prompt(start, rows.shape[0])
        self.apply_settings()
        for group, span in self._prefill_groups(prompts):
            self._prefill_group(group, span)
        for slot, rows, start in prompts:
            self._host_pos[slot] = start + rows.shape[0]
            self._occupied[slot] = True

    def prefill_span(self, start: int, length: int) -> int:
        """The smallest prefill span past a prompt's last position. Past, not at: the padding
        positions of a shorter prompt in the call write their throwaway KV at the span's last
        position, which must not be one the prompt itself writes."""
        return next((span for span in self.prefill_spans if span > start + length), self.kv_length)

    def _prefill_groups(self, prompts: list[tuple[int, Tensor, int]]) -> list[tuple[list, int]]:
        """The prompts in calls of one span each, as many to a call as that span allows; by span,
        so short prompts share the short span however they arrived."""
        spans = [self.prefill_span(start, rows.shape[0]) for _, rows, start in prompts]
        groups: list[tuple[list, int]] = []
        for span in sorted(set(spans)):
            mine = [prompt for prompt, s in zip(prompts, spans, strict=True) if s == span]
            step = self.prefill_batches[span]
            groups += [(mine[i : i + step], span) for i in range(0, len(mine), step)]
        return groups

    def _prefill_group(self, prompts: list[tuple[int, Tensor, int]], span: int) -> None:
        n, longest = len(prompts), max(rows.shape[0] for _, rows, _ in prompts)
        b, t = n, longest
        if self.prefill_buckets is not None:
            batches, lengths = self.prefill_buckets[span]
            b = next(size for size in batches if size >= n)
            t = next(size for size in lengths if size >= longest)
        # Padding rows repeat the first prompt: the same work, so their writes agree with it.
        padded = prompts + prompts[:1] * (b - n)
        meta = torch.tensor([(slot, start, rows.shape[0]) for slot, rows, start in padded])
        # The prompts' rows go to their buffer rows in one scatter, not a copy each: every torch call
        # lets go of the GIL, and taking it back can wait behind the engine's other threads.
        length = self.prefill_rows.shape[1]
        at = torch.tensor([i * length + p for i, (_, rows, _) in enumerate(padded) for p in range(len(rows))])
        flat = self.prefill_rows.view(-1, self.prefill_rows.shape[-1])
        flat.index_copy_(
            0, cuda_graphs.to_device(at, self.device), torch.cat([rows for _, rows, _ in padded])
        )
        self.prefill_meta[:b].copy_(cuda_graphs.pinned(meta, self.device), non_blocking=True)
        if self._graphs is not None:
            self._prefill_graphs[(b, t, span)].replay()
        else:
            self._prefill_compute(b, t, span)

    def _prefill_compute(self, b: int, t: int, span: int) -> None:
        """The prefill of rows [0, b) of the prefill buffers, t positions each, over the first `span`
        positions of their slots' KV: fixed shapes, no host sync. Positions past a prompt's length
        compute too; their KV writes go to the span's last position, which the sequence writes
        before it reads."""
        slots, starts, lengths = self.prefill_meta[:b].unbind(1)
        steps = torch.arange(t, device=self.device)
        valid = steps[None] < lengths[:, None]
        positions = torch.where(valid, starts[:, None] + steps, span - 1)
        cache = self.cache.take(slots, span)
        hidden = self.talker.model(self.prefill_rows[:b, :t], positions, cache)
        self.cache.put(slots, positions, cache)
        last = hidden[torch.arange(b, device=self.device), lengths - 1]
        self.hidden[slots] = last
        self.pos[slots] = starts + lengths
        self.frames_done.index_fill_(0, slots, 0)  # index_fill: a scalar index_put would copy from host
        self.seen.index_fill_(0, slots, False)
        active = torch.ones(b, dtype=torch.bool, device=self.device)
        # The full draw serves every slot's settings; prefills are too rare to need two graphs.
        self.code0[slots] = self._first_code(self.talker.codec_head(last), slots, active, Draw.FULL)

    def step(self, n: int, active: list[bool], text_ids: list[int]) -> Tensor:
        """One frame for the active rows among [0, n), each fed its text-track id.

        Returns [n, 18] on the device: the frame's 16 codes, the next code 0, and whether the
        row's logits were finite; inactive rows are garbage."""
        self.apply_settings()
        b = n if self.buckets is None else next(b for b in self.buckets if b >= n)
        self._copy_inputs(
            b, [(int(a), t) for a, t in zip(active, text_ids, strict=True)] + [(0, 0)] * (b - n)
        )
        draw = max((d for a, d in zip(active, self.draws, strict=False) if a), default=Draw.GREEDY)
        if self._graphs is None:
            self._compute(b, draw, self.attention_span(b, draw))
        else:
            draw = max(draw, Draw.TOP_K)  # the top-k graph serves greedy rows too
            self._graph(b, draw, self.attention_span(b, draw)).replay()
        self._host_pos[:n] += np.asarray(active, dtype=bool)
        return self.outputs[:n]

    def _copy_inputs(self, b: int, rows: list[tuple[int, int]]) -> None:
        """Rows [0, b) of the step inputs from (active, text id) pairs: staged with byte copies,
        which keep the GIL, then one copy in (every torch call lets go of it)."""
        turn, self._turn = self._turn, (self._turn + 1) % INPUT_STAGING
        if self._copied is not None and not self._copied[turn].query():
            self._copied[turn].synchronize()  # only with INPUT_STAGING steps in flight
        cuda_graphs.put_bytes(self._staged_inputs[turn][:b], np.array(rows, dtype=np.int64))
        self.inputs[:b].copy_(self._staging[turn][:b], non_blocking=True)
        if self._copied is not None:
            self._copied[turn].record()

    def attention_span(self, b: int, draw: Draw) -> int:
        """The attention span for rows [0, b): it holds the next position of every occupied row."""
        held = self._host_pos[:b][self._occupied[:b]]
        need = min(int(held.max()) + 1 if len(held) else 1, self.kv_length)
        if self.spans is None:
            return need
        if draw is Draw.FULL:  # rare (top-k over 64, or off): one graph per bucket, at full span
            return self.kv_length
        return next(span for span in self.spans if span >= need)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every (bucket, draw) step graph and every prefill graph now (largest first,
        sharing one memory pool). The prefill warm-ups reset slot 0, so this runs before any
        stream is live."""
        assert self._graphs is not None and self.buckets is not None and self.prefill_buckets is not None
        assert self._capture is not None
        assert self.spans is not None
        started = time.monotonic()
        for b in reversed(self.buckets):
            for span in reversed(self.spans):
                self._graph(b, Draw.TOP_K, span)
            self._graph(b, Draw.FULL, self.kv_length)
        steps_done = time.monotonic()
        self.prefill_meta.zero_()
        self.prefill_meta[:, 2] = 1
        for span in reversed(self.prefill_spans):
            batches, lengths = self.prefill_buckets[span]
            for t in reversed(lengths):
                for b in reversed(batches):
                    run = functools.partial(self._prefill_compute, b, t, span)
                    graph = self._capture(run)
                    self._prefill_graphs[(b, t, span)] = graph
        log.info(
            "captured %d frame-step graphs in %.1f s and %d prefill graphs in %.1f s",
            len(self._graphs),
            steps_done - started,
            len(self._prefill_graphs),
            time.monotonic() - steps_done,
        )

    def _graph(self, b: int, draw: Draw, span: int) -> torch.cuda.CUDAGraph:
        graph = self._graphs.get((b, draw, span)) if self._graphs is not None else None
        if graph is not None:
            return graph
        assert self._graphs is not None
        # With every row inactive, the warm-up runs change nothing that is read.
        saved = self.inputs[:b].clone()
        self.inputs[:b] = 0
        assert self._capture is not None
        graph = self._capture(lambda: self._compute(b, draw, span))
        self._graphs[(b, draw, span)] = graph
        self.inputs[:b] = saved
        log.debug("captured the frame step for batch %d, %s draws, span %d", b, draw.name, span)
        return graph

    def _compute(self, b: int, draw: Draw, span: int) -> None:
        """The step over rows [0, b), attending to positions [0, span), from `inputs` to `outputs`
        and the slot state: fixed shapes, no host sync, so it can be captured."""
        talker = self.talker
        mask = self.inputs[:b, 0] != 0
        text_rows = talker.embed_text(self.inputs[:b, 1])
        hidden, code0 = self.hidden[:b], self.code0[:b]
        residual = talker.code_predictor.predict(
            hidden,
            talker.embed_codec(code0),
            self.predictor_cache.rows(0, b),
            self.predictor_sampling.select(b, mask),
            self.seed[:b],
            self.rounds[:b] << 4,
            draw,
        )
        frame = torch.cat((code0[:, None], residual), dim=1)
        x = (talker.embed_frame(frame) + text_rows)[:, None]
        # A row that is not stepping may sit at kv_length (its sequence ended at the bound), or
        # past the span (it holds no sequence); its throwaway write goes to the span's last
        # position instead, which its sequence, if any, writes before it reads.
        positions = self.pos[:b].clamp(max=span - 1)
        new_hidden, logits = talker(x, positions[:, None], self.cache.rows(0, b, span))
        logits = logits[:, -1]
        self.outputs[:b, -1] = torch.isfinite(logits).all(dim=-1)
        self.hidden[:b] = torch.where(mask[:, None], new_hidden[:, -1], hidden)
        self.pos[:b] += mask
        self.frames_done[:b] += mask
        next_code0 = self._first_code(logits, b, mask, draw)
        self.code0[:b] = torch.where(mask, next_code0, code0)
        self.outputs[:b, : frame.shape[1]] = frame
        self.outputs[:b, -2] = next_code0
