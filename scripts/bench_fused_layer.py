"""The engine's Triton kernels against what they replace on a GPU, at 0.6B shapes in bfloat16, each
figure a CUDA graph of the work replayed (CUDA only; docs/log/2026-11.md, "The fused layer" and
"The activation kernel").

  stack      a code-predictor frame (its 5 layers run 15 times: 2 positions, then 14 x 1) and a
             talker step (28 layers, span 128) per batch, fused (with and without programmatic
             dependent launch, engine.pdl) and unfused, and how far apart their outputs are
  attention  `attend` against q/k norm + RoPE + KV write + few-row attention, per call
  gemv       the GEMV's blocks swept per projection and row count, against cuBLAS
  draw       engine/kernels/fused_draw.py's draw + embedding row against `sampling.sample` + an embedding
             lookup, per batch, for the code predictor's 15 draws of a frame (checkpoint sampling
             settings: top-k 50, temperature 0.9), and whether they drew the same ids
  snake      engine/kernels/fused_snake.py's activation against inductor's compiled `pointwise.snake_beta`
             (as fused kernels ran it before) and with the precise sine, for each of the 29
             activations of a codec decoder pass at 1, 64 and 128 rows x 8 frames: ms, GB/s and
             the largest difference from float32 math
  conv       engine/kernels/fused_conv.py's implicit GEMM against cuDNN (as `conv_time_major` runs it,
             with its bias and residual adds) for each dense conv of a codec decoder pass at
             256 x 8, 64 x 8 and 256 x 1 (rows x frames): ms and TFLOP/s at the default tiles
             (`fused_conv.tiles`); then conv-passes
  conv-sweep conv, and at 256 x 8 the best tile of a sweep for each conv
  conv-passes only conv's decoder passes, more arms with engine/kernels/decoder_window.py's
             attention as well, then with the 96-channel residual units as one kernel each
             (fused_unit), and at 256 x 8 the kernels of each by GPU time

Usage: python scripts/bench_fused_layer.py MODE [--out FILE.json]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from voicewire.engine.config import SamplingParams
from voicewire.engine.kernels import fused_conv, fused_draw, fused_layer, fused_snake, pdl, pointwise
from voicewire.engine.kernels.choice import Kernels, pdl_supported
from voicewire.engine.model import codec_decoder
from voicewire.engine.model import random_checkpoint as tiny
from voicewire.engine.model.layers import (
    DecoderConfig,
    DecoderStack,
    KVCache,
    attention_inputs,
    grouped_attention,
    rope_tables,
    scaled_init_,
)
from voicewire.engine.model.sampling import Draw, RowSampling, sample

DEVICE = torch.device("cuda")
DTYPE = torch.bfloat16


@functools.cache
def with_pdl() -> bool:
    """Programmatic dependent launch where this GPU has it, as the engine launches by default."""
    return pdl_supported(DEVICE)


def kernels(fused_layer: bool = True, pdl: bool | None = None) -> Kernels:
    """The engine's kernels on this GPU (`Kernels.resolve`'s defaults), with the fused layer and
    programmatic dependent launch as asked (`pdl` None: where the GPU has it)."""
    pdl = with_pdl() if pdl is None else pdl
    return Kernels(compiled=True, fused_layer=fused_layer, fused_draw=True, fused_snake=True, pdl=pdl)


def graph_ms(fn: Callable[[], object], repeats: int = 30) -> float:
    """Milliseconds per replay of `fn` captured as one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeats * 1e3


def stack_of(layers: int) -> DecoderStack:
    cfg = DecoderConfig(1024, 3072, layers, 16, 8, 128, 1e-6, 1000000.0)
    stack = DecoderStack(cfg)
    scaled_init_(stack, torch.Generator().manual_seed(1))
    return stack.to(DEVICE, DTYPE).eval()


def unfused(stack: DecoderStack, x: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The stack with neither the fused layer nor its attention kernel (the compiled pieces on)."""
    kernels(fused_layer=False).bind(stack)
    return stack(x, positions, cache)


def fused(stack: DecoderStack, x: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The fused stack without programmatic dependent launch."""
    kernels(pdl=False).bind(stack)
    return fused_layer.stack_forward(stack, x, positions, cache)


def fused_with_pdl(
    stack: DecoderStack, x: torch.Tensor, positions: torch.Tensor, cache: KVCache
) -> torch.Tensor:
    """The fused stack with programmatic dependent launch, where this GPU has it."""
    kernels().bind(stack)
    return fused_layer.stack_forward(stack, x, positions, cache)


def bench_stack() -> list[dict]:
    predictor, talker, rows = stack_of(5), stack_of(28), []
    for b in (1, 2, 4):  # the predictor's first forward at 4 rows is 8 rows, GEMV_ROWS
        cache = predictor.new_cache(b, 16)
        x2 = torch.randn(b, 2, 1024, device=DEVICE, dtype=DTYPE)
        x1 = torch.randn(b, 1, 1024, device=DEVICE, dtype=DTYPE)
        first = torch.arange(2, device=DEVICE).expand(b, 2).contiguous()
        later = [torch.full((b, 1), k, device=DEVICE, dtype=torch.long) for k in range(2, 16)]

        def frame(
            path: Callable, cache: KVCache = cache, x2=x2, x1=x1, first=first, later=later
        ) -> torch.Tensor:
            hidden = path(predictor, x2, first, cache)
            for positions in later:
                hidden = path(predictor, x1, positions, cache)
            return hidden

        outputs, times = {}, {}
        for name, path in (("unfused", unfused), ("fused", fused), ("fused_with_pdl", fused_with_pdl)):
            cache.k.zero_()
            cache.v.zero_()
            outputs[name] = frame(path).float()
            times[name] = graph_ms(lambda path=path: frame(path))
        talker_cache = talker.new_cache(b, 1024)
        talker_cache.k.normal_()
        talker_cache.v.normal_()
        spanned = KVCache(talker_cache.k, talker_cache.v, talker_cache.cos, talker_cache.sin, span=128)
        positions = torch.full((b, 1), 100, device=DEVICE, dtype=torch.long)
        talker_gap = (
            (unfused(talker, x1, positions, spanned) - fused(talker, x1, positions, spanned)).abs().max()
        )
        row = {
            "batch": b,
            "predictor_frame_ms": {k: round(v, 3) for k, v in times.items()},
            "predictor_max_difference": (outputs["fused"] - outputs["unfused"]).abs().max().item(),
            "pdl_same_output": torch.equal(outputs["fused"], outputs["fused_with_pdl"]),
            "talker_step_ms": {
                "unfused": round(graph_ms(functools.partial(unfused, talker, x1, positions, spanned)), 3),
                "fused": round(graph_ms(functools.partial(fused, talker, x1, positions, spanned)), 3),
                "fused_with_pdl": round(
                    graph_ms(functools.partial(fused_with_pdl, talker, x1, positions, spanned)), 3
                ),
            },
            "talker_max_difference": talker_gap.item(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_attention() -> list[dict]:
    rows = []
    cases = [(1, 1, 16, 16), (1, 2, 16, 16), (1, 1, 128, 1024), (8, 1, 128, 1024)]
    cases += [(b, t, s, n) for b in (16, 64, 256) for (t, s, n) in ((1, 128, 512), (1, 16, 16), (2, 16, 16))]
    weight = torch.ones(128, device=DEVICE, dtype=DTYPE)
    for b, t, span, length in cases:
        copies = 5 if b < 64 else 2  # caches of their own, as layers have
        qkv = torch.randn(b, t, 4096, device=DEVICE, dtype=DTYPE)
        caches = [
            tuple(torch.randn(b, 8, length, 128, device=DEVICE, dtype=DTYPE) for _ in range(2))
            for _ in range(copies)
        ]
        cos_table, sin_table = rope_tables(128, 1e6, torch.arange(length, device=DEVICE))
        positions = torch.full((b, t), span - t, device=DEVICE, dtype=torch.long)
        positions += torch.arange(t, device=DEVICE)
        cos, sin = cos_table[positions], sin_table[positions]

        def fused_calls(qkv=qkv, caches=caches, cos=cos, sin=sin, positions=positions, span=span) -> None:
            for k_cache, v_cache in caches:
                fused_layer.attend(
                    qkv, weight, weight, 1e-6, cos, sin, positions, k_cache, v_cache, span, 16, with_pdl()
                )

        def unfused_calls(
            qkv=qkv, caches=caches, positions=positions, span=span, b=b, t=t, tables=(cos_table, sin_table)
        ) -> None:
            chosen = kernels()
            for k_cache, v_cache in caches:
                q, k, v = qkv.split([2048, 1024, 1024], -1)
                cos, sin, bias = chosen.fuse(attention_inputs)(positions, *tables, span, 2, DTYPE)
                q = chosen.fuse(pointwise.qk_norm_rope_store)(
                    q.view(b, t, 16, 128), k.view(b, t, 8, 128), v.view(b, t, 8, 128), weight, weight,
                    1e-6, cos, sin, positions, k_cache, v_cache,
                )  # fmt: skip
                grouped_attention(q, k_cache[:, :, :span], v_cache[:, :, :span], bias, chosen)

        row = {
            "batch": b,
            "positions": t,
            "span": span,
            "fused_us": round(graph_ms(fused_calls) / copies * 1e3, 2),
            "unfused_us": round(graph_ms(unfused_calls) / copies * 1e3, 2),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_gemv() -> list[dict]:
    # (weight rows, K, gated, normed): q/k/v and gate/up carry the norm and the residual sum
    shapes = {
        "qkv": (4096, 1024, False, True),
        "o": (1024, 2048, False, False),
        "gate_up": (6144, 1024, True, True),
        "down": (1024, 3072, False, False),
    }
    copies, rows = 24, []  # distinct weights, more than L2 holds
    for name, (n_total, k, gated, normed) in shapes.items():
        weights = [torch.randn(n_total, k, device=DEVICE, dtype=DTYPE) / 32 for _ in range(copies)]
        for m in (1, 2, 4):
            x = torch.randn(m, k, device=DEVICE, dtype=DTYPE)
            n = n_total // 2 if gated else n_total
            out = torch.empty(m, n, device=DEVICE, dtype=DTYPE)
            total = torch.empty(m, k, device=DEVICE, dtype=DTYPE)
            norm = torch.ones(k, device=DEVICE, dtype=DTYPE)
            cublas = graph_ms(lambda x=x, weights=weights: [F.linear(x, w) for w in weights])
            best = None
            for block_n, block_k, warps in itertools.product((2, 4, 8), (256, 512, 1024), (4, 8)):
                if m * block_n * block_k > 16384:
                    continue

                def calls(x=x, weights=weights, n=n, out=out, total=total, norm=norm, m=m, bn=block_n, bk=block_k, w=warps, k=k, normed=normed, gated=gated) -> None:  # fmt: skip
                    for weight in weights:
                        fused_layer._gemv_kernel[(triton.cdiv(n, bn),)](
                            x, x, total, norm, weight, out, m, n, 1e-6, K=k, HAS_DELTA=normed, NORM=normed,
                            GATED=gated, BLOCK_M=triton.next_power_of_2(m), BLOCK_N=bn, BLOCK_K=bk, num_warps=w,
                            **pdl.launch_options(with_pdl()),
                        )  # fmt: skip

                us = graph_ms(calls) / copies * 1e3
                if best is None or us < best[0]:
                    best = (us, block_n, block_k, warps)
            assert best is not None
            row = {
                "projection": name,
                "rows": m,
                "cublas_us": round(cublas / copies * 1e3, 2),
                "best_us": round(best[0], 2),
                "best_blocks_n_k_warps": best[1:],
                "chosen_blocks_n_k": fused_layer._gemv_blocks(n, k, triton.next_power_of_2(m)),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def bench_draw() -> list[dict]:
    codebooks, vocab, rows = 15, 2048, []
    tables = [torch.randn(vocab, 1024, device=DEVICE, dtype=DTYPE) for _ in range(codebooks)]
    for b in (1, 2, 4, 8, 64, 256):
        params = RowSampling.uniform(SamplingParams(temperature=0.9, top_k=50), b, DEVICE)
        logits = [3 * torch.randn(b, vocab, device=DEVICE, dtype=DTYPE) for _ in range(codebooks)]
        seed = torch.arange(b, device=DEVICE) * 7919
        counter = torch.full((b,), 16, device=DEVICE)
        codes = torch.empty(b, codebooks, dtype=torch.long, device=DEVICE)

        def unfused_calls(params=params, logits=logits, seed=seed, counter=counter) -> list[torch.Tensor]:
            ids = []
            for k in range(codebooks):
                ids.append(kernels().fuse(sample)(logits[k], params, seed, counter + k + 1, Draw.TOP_K))
                F.embedding(ids[-1], tables[k])
            return ids

        def fused_calls(params=params, logits=logits, seed=seed, counter=counter, codes=codes) -> None:
            for k in range(codebooks):
                fused_draw.draw(
                    logits[k], params, seed, counter, k + 1, codes[:, k], tables[k], pdl=with_pdl()
                )

        fused_calls()
        same = (torch.stack(unfused_calls(), dim=1) == codes).float().mean().item()
        row = {
            "batch": b,
            "unfused_us_per_draw": round(graph_ms(unfused_calls) / codebooks * 1e3, 2),
            "fused_us_per_draw": round(graph_ms(fused_calls) / codebooks * 1e3, 2),
            "same_ids": same,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def decoder_activations(rows: int, frames: int) -> list[tuple[tuple[int, int, int], int, bool]]:
    """(x's shape, context frames, whether a bias is pending) of each SnakeBeta call of one
    decoder pass over `rows` fresh streams and `frames` frames (0.6B's codec decoder)."""
    cfg = codec_decoder.CodecDecoderConfig.from_dict(tiny.codec_decoder_config("0.6b"))
    decoder = codec_decoder.CodecDecoder(cfg)
    codec_decoder.random_init_(decoder, torch.Generator().manual_seed(0))
    decoder = decoder.to(DEVICE, DTYPE).eval()
    decoder.prepare()
    kernels().bind(decoder)
    calls = []
    forward = codec_decoder.SnakeBeta.forward

    def record(act, x, bias=None, context=None):  # type: ignore[no-untyped-def]
        calls.append((tuple(x.shape), context.shape[1] if context is not None else 0, bias is not None))
        return forward(act, x, bias, context)

    codec_decoder.SnakeBeta.forward = record
    try:
        codes = torch.randint(0, cfg.codebook_size, (rows, frames, cfg.num_quantizers), device=DEVICE)
        decoder.decode_step(codes, decoder.new_state(rows, DEVICE, DTYPE))
    finally:
        codec_decoder.SnakeBeta.forward = forward
    return calls


def bench_snake() -> list[dict]:
    inductor = torch.compile(pointwise.snake_beta, dynamic=True)
    inductor_after = torch.compile(pointwise.snake_beta_after, dynamic=True)
    gen, rows = torch.Generator(device=DEVICE).manual_seed(0), []
    for b in (1, 64, 128):
        totals = {"fused_ms": 0.0, "precise_sine_ms": 0.0, "inductor_ms": 0.0}
        for (_, t, c), context, pending in decoder_activations(b, 8):
            x = torch.randn(b, t, c, device=DEVICE, dtype=DTYPE, generator=gen)
            # Parameters, as the decoder passes them: inductor takes their sizes (C) as constants.
            alpha, beta, bias = (
                torch.nn.Parameter(p, requires_grad=False)
                for p in (0.5 * torch.randn(3, c, device=DEVICE, generator=gen)).to(DTYPE)
            )
            bias = bias if pending else None
            carried = (
                torch.randn(b, context, c, device=DEVICE, dtype=DTYPE, generator=gen) if context else None
            )
            want = pointwise.snake_beta(
                x.float(), alpha.float(), beta.float(), None if bias is None else bias.float()
            )
            if carried is not None:
                want = torch.cat([carried.float(), want], dim=1)
            runs = {
                "fused": functools.partial(fused_snake.snake_beta, x, alpha, beta, bias, carried),
                "precise_sine": functools.partial(
                    fused_snake.snake_beta, x, alpha, beta, bias, carried, False
                ),
                "inductor": (
                    functools.partial(inductor, x, alpha, beta, bias)
                    if carried is None
                    else functools.partial(inductor_after, carried, x, alpha, beta)
                ),
            }
            moved = (x.numel() + want.numel()) * x.element_size()
            row: dict[str, object] = {
                "batch": b,
                "frames": 8,
                "channels": c,
                "time": t,
                "context": context,
                "bias": pending,
            }
            for name, call in runs.items():
                ms = graph_ms(call)
                totals[f"{name}_ms"] += ms
                row[f"{name}_ms"] = round(ms, 4)
                row[f"{name}_GBps"] = round(moved / ms / 1e6)
                row[f"{name}_max_error"] = (call().float() - want).abs().max().item()
            print(json.dumps(row), flush=True)
            rows.append(row)
        total = {"batch": b, "frames": 8, "activations": "all"} | {k: round(v, 3) for k, v in totals.items()}
        print(json.dumps(total), flush=True)
        rows.append(total)
    return rows


SWEEP = [
    fused_conv.Tiles(*t)
    for t in (
        (128, 128, 64, 8, 3),
        (128, 128, 64, 4, 3),
        (128, 128, 64, 8, 4),
        (128, 128, 32, 8, 4),
        (128, 64, 64, 4, 3),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 3),
        (64, 64, 64, 4, 3),
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
        (256, 64, 64, 8, 3),
        (64, 256, 64, 8, 3),
    )
]


def decoder_convs(rows: int, frames: int) -> list[tuple[str, torch.nn.Module, tuple[int, ...]]]:
    """The dense convs of one decoder pass of rows x frames, in order: (kind, conv, input shape)."""
    decoder, cfg = real_decoder()
    calls: list[tuple[str, torch.nn.Module, tuple[int, ...]]] = []
    original = codec_decoder.conv_time_major

    def record(conv, x, with_bias=True):  # type: ignore[no-untyped-def]
        if conv.groups == 1:
            kind = "transposed" if isinstance(conv, torch.nn.ConvTranspose1d) else "conv"
            kind = "1x1+residual" if kind == "conv" and conv.kernel_size == (1,) else kind
            calls.append((kind, conv, tuple(x.shape)))
        return original(conv, x, with_bias)

    codec_decoder.conv_time_major = record
    try:
        codes = torch.randint(0, cfg.codebook_size, (rows, frames, cfg.num_quantizers), device=DEVICE)
        decoder.decode_step(codes, decoder.new_state(rows, DEVICE, DTYPE))
    finally:
        codec_decoder.conv_time_major = original
    return calls


@functools.cache
def real_decoder() -> tuple[codec_decoder.CodecDecoder, codec_decoder.CodecDecoderConfig]:
    cfg = codec_decoder.CodecDecoderConfig.from_dict(tiny.codec_decoder_config("0.6b"))
    decoder = codec_decoder.CodecDecoder(cfg)
    codec_decoder.random_init_(decoder, torch.Generator().manual_seed(0))
    decoder = decoder.to(DEVICE, DTYPE).eval()
    decoder.prepare()
    kernels().bind(decoder)
    return decoder, cfg


def bench_conv(sweep: bool = False) -> list[dict]:
    torch.backends.cudnn.benchmark = True  # as the decoder's graphs are captured
    gen, rows_out = torch.Generator(device=DEVICE).manual_seed(0), []
    for b, frames in ((256, 8), (64, 8), (256, 1)):
        totals = {"cudnn_ms": 0.0, "fused_ms": 0.0, "best_ms": 0.0}
        for kind, conv, shape in decoder_convs(b, frames):
            x = torch.randn(shape, device=DEVICE, dtype=DTYPE, generator=gen)
            w = codec_decoder.pack_conv(conv)
            t = shape[1] - w.context
            out_shape = (b, t, w.out_channels)
            res = (
                torch.randn(out_shape, device=DEVICE, dtype=DTYPE, generator=gen)
                if kind == "1x1+residual"
                else None
            )
            if res is None:
                cudnn = functools.partial(codec_decoder.conv_time_major, conv, x)
            else:
                cudnn = lambda conv=conv, x=x, res=res: res + codec_decoder.conv_time_major(conv, x)  # noqa: E731
            flop = 2 * b * t * w.taps * w.in_channels * w.out_channels
            want = cudnn().float()
            if kind == "transposed":
                start = conv.stride[0] if w.taps == 2 else 0
                want = want[:, start : start + t * conv.stride[0]].reshape(out_shape)
            ms = graph_ms(cudnn)
            row: dict[str, object] = {
                "rows": b,
                "frames": frames,
                "kind": kind,
                "in": list(shape),
                "out": w.out_channels,
                "taps": w.taps,
                "dilation": w.dilation,
                "cudnn_ms": round(ms, 4),
                "cudnn_TFLOPs": round(flop / ms / 1e9, 1),
            }
            totals["cudnn_ms"] += ms
            default = fused_conv.tiles(w)
            candidates = [default] + (SWEEP if sweep and (b, frames) == (256, 8) else [])
            best = None
            for tile in candidates:
                if w.in_channels % tile.block_k:
                    continue
                call = functools.partial(fused_conv.conv, x, w, res, at=tile)
                try:
                    got = call().float()
                    ms = graph_ms(call)
                except Exception as error:  # out of shared memory, say
                    print(json.dumps({"tile": str(tile), "error": str(error)[:200]}), flush=True)
                    continue
                error = (got - want).abs().max().item()
                if tile is default:
                    row |= {
                        "fused_ms": round(ms, 4),
                        "fused_TFLOPs": round(flop / ms / 1e9, 1),
                        "fused_max_diff": error,
                    }
                    totals["fused_ms"] += ms
                if best is None or ms < best[0]:
                    best = (ms, tile)
            if best is not None:
                row |= {"best_ms": round(best[0], 4), "best_tile": list(vars(best[1]).values())}
                totals["best_ms"] += best[0]
            print(json.dumps(row), flush=True)
            rows_out.append(row)
        total = {"rows": b, "frames": frames, "convs": "all"} | {k: round(v, 3) for k, v in totals.items()}
        print(json.dumps(total), flush=True)
        rows_out.append(total)
    rows_out += bench_decoder_passes()
    return rows_out


def bench_decoder_passes() -> list[dict]:
    """Graphed decoder passes with cuDNN's convs, with the fused ones, with those and the window
    attention kernel, and with the narrow residual units as one kernel each too (cuDNN timing its
    candidates, as while the engine captures), each one's largest difference from the same decode
    in float32, and at 256 x 8 the GPU's kernels of one eager pass of each, by time."""
    torch.backends.cudnn.benchmark = True
    decoder, cfg = real_decoder()
    exact = copy.deepcopy(decoder).float()
    exact.prepare()
    Kernels().bind(exact)
    arms: dict[str, dict[str, bool]] = {
        "cudnn": {"fused_conv": False},
        "fused": {"fused_conv": True},
        "fused_window": {"fused_conv": True, "fused_window": True},
        "fused_unit": {"fused_conv": True, "fused_window": True, "fused_unit": True},
    }
    rows_out: list[dict] = []
    for b, frames in ((1, 1), (1, 8), (64, 8), (256, 1), (256, 8)):
        codes = torch.randint(0, cfg.codebook_size, (b, frames, cfg.num_quantizers), device=DEVICE)
        want = exact.decode_step(codes, exact.new_state(b, DEVICE, torch.float32))
        row: dict[str, object] = {"rows": b, "frames": frames, "pass": "decoder"}
        for name, arm in arms.items():
            dataclasses.replace(kernels(), **arm).bind(decoder)
            state = decoder.new_state(b, DEVICE, DTYPE)
            got = decoder.decode_step(codes, state)
            row[f"{name}_max_diff"] = (got.float() - want).abs().max().item()
            row[f"{name}_ms"] = round(graph_ms(functools.partial(decoder.decode_step, codes, state)), 3)
            if (b, frames) == (256, 8):
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    decoder.decode_step(codes, state)
                    torch.cuda.synchronize()
                top = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:14]
                row[f"{name}_kernels"] = [
                    [e.key[:90], e.count, round(e.device_time_total / 1e3, 3)] for e in top
                ]
        print(json.dumps(row), flush=True)
        rows_out.append(row)
    return rows_out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode", choices=["stack", "attention", "gemv", "draw", "snake", "conv", "conv-sweep", "conv-passes"]
    )
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_fused_layer needs a CUDA GPU")
    with torch.inference_mode():
        modes = {
            "stack": bench_stack,
            "attention": bench_attention,
            "gemv": bench_gemv,
            "draw": bench_draw,
            "snake": bench_snake,
            "conv": bench_conv,
            "conv-sweep": functools.partial(bench_conv, sweep=True),
            "conv-passes": bench_decoder_passes,
        }
        rows = modes[args.mode]()
    report = {"device": torch.cuda.get_device_name(DEVICE), "mode": args.mode, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
