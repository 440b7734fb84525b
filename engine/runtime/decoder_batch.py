"""The codec decoder's incremental step over a group of stream rows, graphed on CUDA.

`BatchedDecoder` owns every stream's decoder context (one row per slot, plus a scratch row) and
decodes a group of rows together, reading and writing their contexts in place. On CUDA each
(batch bucket, frame count) shape is one captured graph: a group is padded to its bucket with the
scratch row, and a frame count not in `GRAPH_FRAMES` is cut into ones that are. The decoder is
causal and carries its context, so any cut gives the samples of one whole decode. Resetting the
rows of new streams is graphed per bucket too.

A padded group costs the host three torch calls: one copy of its rows and codes in, the replay,
one copy of its samples out (and a pass one wait). Each torch call lets go of the GIL, and the
engine's other threads run Python, so every call may wait to get it back; the group's inputs are
therefore staged in page-locked memory with plain byte copies, which keep the GIL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from voicewire.engine.kernels import cuda_graphs
from voicewire.engine.model.codec_decoder import CodecDecoder

log = logging.getLogger(__name__)

GRAPH_FRAMES = (8, 4, 2, 1)  # frame counts with a graph, largest first: any count is a sum of them
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# cuDNN candidates timed per conv shape while capturing batches over FEW_CANDIDATES_ABOVE rows
# (docs/log/2026-11.md, "Start-up time"); smaller batches time cuDNN's default number
CUDNN_CANDIDATES = 3
FEW_CANDIDATES_ABOVE = 64


def split_frames(n: int) -> list[int]:
    """n frames as a sum of GRAPH_FRAMES, largest first (13 -> [8, 4, 1])."""
    parts = []
    for size in GRAPH_FRAMES:
        while n >= size:
            parts.append(size)
            n -= size
    return parts


def plan_rows(rows: int, buckets: list[int], cost: Callable[[int], float]) -> list[list[int]]:
    """For every row count m up to `rows`, the row counts (largest first) that sum to m with the
    least total `cost(bucket)`, each group decoded padded to its bucket: 65 rows may cost less as
    64 + 1 than padded to 96."""
    best = [0.0] + [float("inf")] * rows
    last = [0] * (rows + 1)  # the group that ends the best plan for m rows
    for m in range(1, rows + 1):
        for b in buckets:
            total = best[max(0, m - b)] + cost(b)
            if total < best[m]:
                best[m], last[m] = total, min(b, m)
    plans: list[list[int]] = [[]]
    for m in range(1, rows + 1):
        plans.append(sorted([last[m], *plans[m - last[m]]], reverse=True))
    return plans


def to_host(audio: Tensor) -> Tensor:
    """The samples on the CPU. From CUDA through page-locked memory, which the caching host allocator
    reuses once a chunk's samples are dropped: a pageable copy of 256 x 8 frames took 10 ms of this
    thread, a pinned one 0.3 ms."""
    if audio.device.type != "cuda":
        return audio
    host = torch.empty(audio.shape, dtype=audio.dtype, pin_memory=True)
    host.copy_(audio, non_blocking=True)
    torch.cuda.current_stream(audio.device).synchronize()
    return host


@dataclass(frozen=True)
class _Shape:
    """Views of the static buffers that the (bucket b, frames n) graph reads and writes. A group's
    inputs are its rows [b] then its codes [b, n, Q], one contiguous prefix of the input buffer, so
    one copy puts them in place."""

    inputs: Tensor  # int64 [b * (1 + n * Q)], the prefix of the input buffer
    rows: Tensor  # int64 [b]
    codes: Tensor  # int64 [b, n, Q]
    audio: Tensor | None  # float32 [b, n * samples_per_frame], the graph's output (None without graphs)


class BatchedDecoder:
    """Decoder contexts for `slots` streams; `graphs` captures the shapes on CUDA, `pad` runs the
    same padded shapes without graphs (so eager and graphed runs compare exactly)."""

    def __init__(self, decoder: CodecDecoder, slots: int, graphs: bool = False, pad: bool = False) -> None:
        weight = decoder.pre_conv.conv.weight
        self.decoder = decoder
        self.device = weight.device
        if graphs and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the decoder is on {self.device}")
        self.slots = slots
        self.scratch = slots  # padding rows decode into this row, which no stream owns
        self.state = decoder.new_state(slots + 1, self.device, weight.dtype)
        self.buckets = sorted({min(b, slots) for b in BATCH_BUCKETS}) if graphs or pad else None
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] | None = {} if graphs else None
        self._reset_graphs: dict[int, torch.cuda.CUDAGraph] | None = {} if graphs else None
        self._capture = cuda_graphs.GraphCapture(self.device) if graphs else None
        self._shapes: dict[tuple[int, int], _Shape] = {}
        if self.buckets is not None:
            self._allocate_static(graphs)
        # Row groups per frame count and row count, from each graph's replay time (set by capture).
        self.plans: dict[int, list[list[int]]] | None = None

    def _allocate_static(self, graphs: bool) -> None:
        assert self.buckets is not None
        q, spf = self.decoder.cfg.num_quantizers, self.decoder.cfg.samples_per_frame
        most = self._top() * (1 + GRAPH_FRAMES[0] * q)
        self._inputs = torch.zeros(most, dtype=torch.long, device=self.device)
        audio = torch.zeros(self._top() * GRAPH_FRAMES[0] * spf, device=self.device) if graphs else None
        for b in self.buckets:
            for n in GRAPH_FRAMES:
                size = b * (1 + n * q)
                out = audio[: b * n * spf].view(b, n * spf) if audio is not None else None
                self._shapes[(b, n)] = _Shape(
                    self._inputs[:size], self._inputs[:b], self._inputs[b:size].view(b, n, q), out
                )
        # A call's groups are staged in parts of their own (their copies in may still be queued);
        # sized for one pass over every slot, grown for a longer call.
        self._stage_buffer(2 * most)
        self._zeros = bytes(most * self._inputs.element_size())  # padding rows' codes

    def _stage_buffer(self, size: int) -> None:
        self._staging = torch.empty(size, dtype=torch.long, pin_memory=self.device.type == "cuda")
        self._staged = self._staging.numpy()

    def reset(self, rows: list[int]) -> None:
        """Start `rows` afresh for new streams. Graphed, a reset is one launch per bucket: eagerly it
        is an index fill per context tensor (38 for the 12 Hz codec), and a burst of 256 new
        streams spent most of the decoder thread's first half second launching them."""
        if self._reset_graphs is None:
            self.state.reset(self._index(rows))
            return
        top = self._top()
        for lo in range(0, len(rows), top):
            group = rows[lo : lo + top]
            b = self._bucket(len(group))
            graph = self._reset_graph(b)
            padded = torch.tensor(group + [self.scratch] * (b - len(group)), dtype=torch.long)
            self._shapes[(b, 1)].rows.copy_(cuda_graphs.pinned(padded, self.device), non_blocking=True)
            graph.replay()

    def decode(self, rows: list[int], codes: Tensor, launched: Callable[[], None] | None = None) -> Tensor:
        """Codes [B, n, 16] (any device) for the streams in `rows` -> samples [B, n * upsample] float32
        on CPU. `launched()` is called once the work is queued on the current stream, before the
        wait for it."""
        if self.buckets is None:
            codes = cuda_graphs.to_device(codes, self.device)
            audio = self._decode_eager(self._index(rows), codes)
            if launched is not None:
                launched()
            return to_host(audio)
        host = codes.numpy() if codes.device.type == "cpu" else codes.cpu().numpy()
        plan: list[tuple[int, int, list[tuple[int, int]]]] = []  # (frames, first frame, (row, rows) groups)
        first = 0
        for n in split_frames(host.shape[1]):
            groups, lo = [], 0
            for size in self._row_groups(n, len(rows)):
                groups.append((lo, size))
                lo += size
            plan.append((n, first, groups))
            first += n
        need = sum(
            self._shapes[(self._bucket(k), n)].inputs.shape[0] for n, _, groups in plan for _, k in groups
        )
        if need > self._staging.shape[0]:  # safe: every call waits for its copies before it returns
            self._stage_buffer(need)
        passes, at = [], 0
        for n, first, groups in plan:
            out = torch.empty(
                len(rows), n * self.decoder.cfg.samples_per_frame, pin_memory=self.device.type == "cuda"
            )
            for lo, k in groups:
                at = self._launch(
                    rows[lo : lo + k], host[lo : lo + k, first : first + n], out[lo : lo + k], at
                )
            passes.append(out)
        if launched is not None:
            launched()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return passes[0] if len(passes) == 1 else torch.cat(passes, dim=1)

    def _launch(self, rows: list[int], codes: np.ndarray, out: Tensor, at: int) -> int:
        """Decode one group padded to its bucket: stage its rows and codes at `at` of the staging
        buffer, copy them in, replay, and queue the copy of its samples into `out` [k, samples].
        Returns where the next group's staging starts."""
        k, n = len(rows), codes.shape[1]
        b = self._bucket(k)
        # First: a capture runs its warm-ups on the scratch row, through the same inputs.
        graph = self._graph(b, n) if self._graphs is not None else None
        shape = self._shapes[(b, n)]
        size, filled = shape.inputs.shape[0], b + k * codes.shape[1] * codes.shape[2]
        staged = self._staged[at : at + size]
        cuda_graphs.put_bytes(staged[:b], np.array(rows + [self.scratch] * (b - k), dtype=np.int64))
        cuda_graphs.put_bytes(staged[b:filled], np.ascontiguousarray(codes, dtype=np.int64))
        cuda_graphs.put_bytes(staged[filled:], memoryview(self._zeros)[: (size - filled) * staged.itemsize])
        shape.inputs.copy_(self._staging[at : at + size], non_blocking=True)
        if graph is None:
            audio = self._decode_eager(shape.rows, shape.codes)[:k]
        else:
            assert shape.audio is not None
            graph.replay()
            audio = shape.audio[:k]
        out.copy_(audio, non_blocking=True)
        return at + size

    def _row_groups(self, n: int, rows: int) -> list[int]:
        """How `rows` rows decode n frames: in the groups the measured plan gives, or in groups of
        the largest bucket."""
        if self.plans is not None and rows < len(self.plans[n]):
            return self.plans[n][rows]
        top = self._top()
        return [min(top, rows - lo) for lo in range(0, rows, top)]

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every (bucket, frames) graph now, largest first, sharing one memory pool."""
        assert self._graphs is not None and self.buckets is not None
        # cuDNN's heuristics picked a direct kernel for one dilated channels-last conv shape that
        # ran 1.4 s instead of 2 ms; timing the candidates once per captured shape avoids such
        # picks. Only while capturing: elsewhere (the encoders) every new length would be timed.
        # Above FEW_CANDIDATES_ABOVE rows it times only its first CUDNN_CANDIDATES candidates: the
        # other ones of the default 10 cost most of the start, for picks 2% faster at most there.
        benchmark, limit = torch.backends.cudnn.benchmark, torch.backends.cudnn.benchmark_limit
        torch.backends.cudnn.benchmark = True
        started = time.monotonic()
        try:
            for b in reversed(self.buckets):
                torch.backends.cudnn.benchmark_limit = CUDNN_CANDIDATES if b > FEW_CANDIDATES_ABOVE else limit
                for n in GRAPH_FRAMES:
                    self._graph(b, n)
                self._reset_graph(b)
        finally:
            torch.backends.cudnn.benchmark = benchmark
            torch.backends.cudnn.benchmark_limit = limit
        captured = time.monotonic()
        self.plans = self._plans(self._replay_ms())
        log.info(
            "captured %d decoder graphs and %d row resets in %.1f s, timed their replays in %.1f s",
            len(self._graphs),
            len(self._reset_graphs or {}),
            captured - started,
            time.monotonic() - captured,
        )

    def _replay_ms(self, repeats: int = 3) -> dict[tuple[int, int], float]:
        """Milliseconds per replay of each captured (bucket, frames) graph, on scratch rows only."""
        assert self._graphs is not None
        times = {}
        for (b, n), graph in self._graphs.items():
            self._scratch_inputs(b)
            graph.replay()
            torch.cuda.synchronize(self.device)
            started = time.perf_counter()
            for _ in range(repeats):
                graph.replay()
            torch.cuda.synchronize(self.device)
            times[(b, n)] = (time.perf_counter() - started) / repeats * 1e3
        return times

    def _plans(self, replay_ms: dict[tuple[int, int], float]) -> dict[int, list[list[int]]]:
        """For each frame count, the cheapest row groups of every row count up to the largest bucket."""
        assert self.buckets is not None
        top = self._top()
        return {n: plan_rows(top, self.buckets, lambda b, n=n: replay_ms[(b, n)]) for n in GRAPH_FRAMES}

    def _decode_eager(self, rows: Tensor, codes: Tensor) -> Tensor:
        return self.decoder.decode_step(codes, self.state, rows).float()

    def _top(self) -> int:
        assert self.buckets is not None
        return self.buckets[-1]

    def _bucket(self, rows: int) -> int:
        assert self.buckets is not None
        return next(size for size in self.buckets if size >= rows)

    def _index(self, rows: list[int]) -> Tensor:
        return cuda_graphs.to_device(torch.tensor(rows, dtype=torch.long), self.device)

    def _scratch_inputs(self, b: int) -> None:
        """Every shape of bucket b on the scratch row with codes 0, so its runs move no stream's context."""
        self._shapes[(b, GRAPH_FRAMES[0])].inputs.zero_()
        self._shapes[(b, GRAPH_FRAMES[0])].rows.fill_(self.scratch)

    def _graph(self, b: int, n: int) -> torch.cuda.CUDAGraph:
        assert self._graphs is not None
        return self._captured(self._graphs, (b, n), b, lambda: self._compute(b, n))

    def _reset_graph(self, b: int) -> torch.cuda.CUDAGraph:
        assert self._reset_graphs is not None
        return self._captured(self._reset_graphs, b, b, lambda: self.state.reset(self._shapes[(b, 1)].rows))

    def _captured(self, graphs: dict, key: object, b: int, run: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """`graphs[key]`, captured from `run` (which reads bucket b's inputs) on first use. The
        inputs are left on the scratch row: the caller stages its own after."""
        graph = graphs.get(key)
        if graph is not None:
            return graph
        assert self._capture is not None
        self._scratch_inputs(b)  # the warm-up runs are real
        graph = self._capture(run)
        graphs[key] = graph
        log.debug("captured a decoder graph %s", key)
        return graph

    def _compute(self, b: int, n: int) -> None:
        shape = self._shapes[(b, n)]
        assert shape.audio is not None
        shape.audio.copy_(self._decode_eager(shape.rows, shape.codes))
