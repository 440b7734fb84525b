"""The codec decoder's incremental step over a group of stream rows, graphed on CUDA.

`BatchedDecoder` owns every stream's decoder context (one row per slot, plus a scratch row) and
decodes a group of rows together, reading and writing their contexts in place. On CUDA each
(batch bucket, frame count) shape is one captured graph: a group is padded to its bucket with the
scratch row, and a frame count not in `GRAPH_FRAMES` is cut into ones that are. The decoder is
causal and carries its context, so any cut gives the samples of one whole decode. Resetting the
rows of new streams is graphed per bucket too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from torch import Tensor

from voicewire.engine import cuda_graphs
from voicewire.engine.codec_decoder import CodecDecoder

log = logging.getLogger(__name__)

GRAPH_FRAMES = (8, 4, 2, 1)  # frame counts with a graph, largest first: any count is a sum of them
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# cuDNN candidates timed per conv shape while capturing batches over FEW_CANDIDATES_ABOVE rows
# (docs/benchmarks.md, "Start-up time"); smaller batches time cuDNN's default number
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
        self._pool = None
        top = self.buckets[-1] if self.buckets else slots
        self._rows = torch.full((top,), self.scratch, dtype=torch.long, device=self.device)
        self._codes = torch.zeros(
            top, GRAPH_FRAMES[0], decoder.cfg.num_quantizers, dtype=torch.long, device=self.device
        )
        samples = GRAPH_FRAMES[0] * decoder.cfg.samples_per_frame if graphs else 0
        self._audio = torch.zeros(top if graphs else 0, samples, dtype=torch.float32, device=self.device)
        # Row groups per frame count and row count, from each graph's replay time (set by capture).
        self.plans: dict[int, list[list[int]]] | None = None

    def reset(self, rows: list[int]) -> None:
        """Start `rows` afresh for new streams. Graphed, a reset is one launch per bucket: eagerly it
        is an index fill per context tensor (38 for the 12 Hz codec), and a burst of 256 new
        streams spent most of the decoder thread's first half second launching them."""
        if self._reset_graphs is None:
            self.state.reset(self._index(rows))
            return
        top = self._top()
        for lo in range(0, len(rows), top):
            b = self._fill_rows(rows[lo : lo + top])
            self._reset_graph(b).replay()

    def decode(self, rows: list[int], codes: Tensor) -> Tensor:
        """Codes [B, n, 16] (any device) for the streams in `rows` -> samples [B, n * upsample] float32 on CPU."""
        codes = cuda_graphs.to_device(codes, self.device)
        if self.buckets is None:
            return to_host(self._decode_eager(self._index(rows), codes))
        pieces, start = [], 0
        for n in split_frames(codes.shape[1]):
            audio, lo = [], 0
            for size in self._row_groups(n, len(rows)):
                audio.append(
                    self._decode_padded(rows[lo : lo + size], codes[lo : lo + size, start : start + n])
                )
                lo += size
            pieces.append(torch.cat(audio))
            start += n
        return to_host(torch.cat(pieces, dim=1))

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
        self._rows.fill_(self.scratch)
        times = {}
        for key, graph in self._graphs.items():
            graph.replay()
            torch.cuda.synchronize(self.device)
            started = time.perf_counter()
            for _ in range(repeats):
                graph.replay()
            torch.cuda.synchronize(self.device)
            times[key] = (time.perf_counter() - started) / repeats * 1e3
        return times

    def _plans(self, replay_ms: dict[tuple[int, int], float]) -> dict[int, list[list[int]]]:
        """For each frame count, the cheapest row groups of every row count up to the largest bucket."""
        assert self.buckets is not None
        top = self._top()
        return {n: plan_rows(top, self.buckets, lambda b, n=n: replay_ms[(b, n)]) for n in GRAPH_FRAMES}

    def _decode_eager(self, rows: Tensor, codes: Tensor) -> Tensor:
        return self.decoder.decode_step(codes, self.state, rows).float()

    def _decode_padded(self, rows: list[int], codes: Tensor) -> Tensor:
        k, n = len(rows), codes.shape[1]
        b = self._fill_rows(rows)
        self._codes[:b, :n] = 0
        self._codes[:k, :n] = codes
        if self._graphs is None:
            return self._decode_eager(self._rows[:b], self._codes[:b, :n])[:k]
        self._graph(b, n).replay()
        # A copy: the next replay rewrites the static buffer.
        return self._audio[:k, : n * self.decoder.cfg.samples_per_frame].clone()

    def _top(self) -> int:
        assert self.buckets is not None
        return self.buckets[-1]

    def _fill_rows(self, rows: list[int]) -> int:
        """Put `rows` in the static row buffer, padded with the scratch row to their bucket; returns
        the bucket."""
        assert self.buckets is not None
        k = len(rows)
        b = next(size for size in self.buckets if size >= k)
        self._rows[:b] = self.scratch
        self._rows[:k] = self._index(rows)
        return b

    def _index(self, rows: list[int]) -> Tensor:
        return cuda_graphs.to_device(torch.tensor(rows, dtype=torch.long), self.device)

    def _graph(self, b: int, n: int) -> torch.cuda.CUDAGraph:
        assert self._graphs is not None
        return self._captured(self._graphs, (b, n), b, lambda: self._compute(b, n))

    def _reset_graph(self, b: int) -> torch.cuda.CUDAGraph:
        assert self._reset_graphs is not None
        return self._captured(self._reset_graphs, b, b, lambda: self.state.reset(self._rows[:b]))

    def _captured(self, graphs: dict, key: object, b: int, run: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """`graphs[key]`, captured from `run` (which reads rows [0, b) of the row buffer) on first use."""
        graph = graphs.get(key)
        if graph is not None:
            return graph
        # Every row is the scratch row, so the warm-up runs move no stream's context.
        saved = self._rows[:b].clone()
        self._rows[:b] = self.scratch
        graph = cuda_graphs.capture(run, self.device, self._pool)
        self._pool = graph.pool()
        graphs[key] = graph
        self._rows[:b] = saved
        log.debug("captured a decoder graph %s", key)
        return graph

    def _compute(self, b: int, n: int) -> None:
        audio = self._decode_eager(self._rows[:b], self._codes[:b, :n])
        self._audio[:b, : audio.shape[1]] = audio
