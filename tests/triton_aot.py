"""Compiles the engine's Triton kernels for a Hopper GPU (sm_90) on a machine without one.

The CPU tests run the kernels in Triton's interpreter, which checks their arithmetic but not that
the GPU compiler takes them (types that differ between branches, unsupported ops). Here each
wrapper (`fused_draw.draw`, `fused_layer.gemv`, `fused_layer.attend`, `fused_snake.snake_beta`,
`fused_conv.conv`, `fused_conv.unit`, `decoder_window.attend`) is called on CPU tensors of
the engine's shapes with its kernel swapped for a recorder, and each recorded launch is compiled
ahead of time to a cubin, with the argument types and constants the wrapper passed.

Run as `python -m tests.triton_aot` without TRITON_INTERPRET (the interpreter replaces @triton.jit);
prints one JSON line per launch.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable

import torch

TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.int64: "i64"}
TYPES |= {torch.int32: "i32", torch.bool: "i1"}


class Recorder:
    """Stands in for a kernel: `kernel[grid](*args, **kwargs)` keeps the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid: tuple) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def _type(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def compile_call(kernel, args: tuple, kwargs: dict) -> dict:
    """One recorded launch of `kernel` compiled for sm_90: its name, constants and machine code size."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(inspect.signature(kernel.fn).parameters)
    constexpr = {p.name for p in kernel.params if p.is_constexpr}
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "launch_pdl") if k in kwargs}
    values = dict(zip(names, args, strict=False)) | kwargs
    constants = {n: v for n, v in values.items() if n in constexpr}
    signature = {n: "constexpr" if n in constants else _type(v) for n, v in values.items()}
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=constants),
        target=GPUTarget("cuda", 90, 32),
        options=options,
    )
    ptx = compiled.asm["ptx"]
    return {
        "kernel": kernel.fn.__name__,
        "num_warps": compiled.metadata.num_warps,
        "num_stages": compiled.metadata.num_stages,
        "cubin_bytes": len(compiled.asm["cubin"]),
        "launch_pdl": bool(compiled.metadata.launch_pdl),
        "waits": "griddepcontrol.wait" in ptx,
        "launches_dependents": "griddepcontrol.launch_dependents" in ptx,
    } | constants


def recorded(module, name: str, wrapper: Callable, *args: object, **kwargs: object) -> list[tuple]:
    """(kernel, args, kwargs) of each launch `wrapper(*args, **kwargs)` makes of `module.name`, with
    the kernel swapped for a recorder."""
    kernel, recorder = getattr(module, name), Recorder()
    setattr(module, name, recorder)
    try:
        wrapper(*args, **kwargs)
    finally:
        setattr(module, name, kernel)
    return [(kernel, *call) for call in recorder.calls]


def launches() -> list[tuple]:
    """(kernel, args, kwargs) for the engine's kernels at 0.6B shapes in bfloat16 and tiny ones in
    float32, launched one after another, then with programmatic dependent launch (engine.pdl)."""
    return (
        _launches(pdl=False) + _launches(pdl=True) + _snake_launches() + _conv_launches() + _window_launches()
    )


def _snake_launches() -> list[tuple]:
    """The codec decoder's activation (no PDL: it follows cuDNN's convs): bfloat16 with the fast
    sine and float32 with the precise one, each after a context and with a pending bias, in the
    large and the small tile."""
    from voicewire.engine.kernels import fused_snake

    found = []
    for dtype in (torch.bfloat16, torch.float32):
        params = torch.zeros(96, dtype=dtype)
        for rows, t in ((64, 2000), (1, 8)):
            x = torch.zeros(rows, t, 96, dtype=dtype)
            call = (fused_snake, "_snake_kernel", fused_snake.snake_beta, x, params, params)
            found += recorded(*call, None, torch.zeros(rows, 54, 96, dtype=dtype))
            found += recorded(*call, params)
    return found


def _conv_launches() -> list[tuple]:
    """The codec decoder's conv kernel (no PDL: cuDNN's convs and the activation surround it) in
    each of `fused_conv.tiles`' tiles, at 0.6B decoder shapes in bfloat16: (input channels, output
    channels, taps, with a residual); and once in float32 (its dot in IEEE precision)."""
    from voicewire.engine.kernels import fused_conv

    found = []
    shapes = [(96, 96, 7, False), (192, 192, 1, True), (384, 384, 1, True), (384, 384, 7, False)]
    for dtype, (c_in, c_out, taps, residual) in [(torch.bfloat16, s) for s in shapes] + [
        (torch.bfloat16, (1536, 6144, 2, False)),
        (torch.float32, (768, 768, 7, False)),
    ]:
        packed = fused_conv.pack(
            torch.zeros(c_out, c_in, taps, dtype=dtype), torch.zeros(c_out, dtype=dtype), 3
        )
        x = torch.zeros(4, packed.context + 256, c_in, dtype=dtype)
        res = torch.zeros(4, 256, c_out, dtype=dtype) if residual else None
        found += recorded(fused_conv, "_conv_kernel", fused_conv.conv, x, packed, res)
    # A 96-channel residual unit in one kernel (fused_unit): bfloat16 (the fast sine) and float32.
    for dtype in (torch.bfloat16, torch.float32):
        first = fused_conv.pack(torch.zeros(96, 96, 7, dtype=dtype), torch.zeros(96, dtype=dtype), 9)
        second = fused_conv.pack(torch.zeros(96, 96, 1, dtype=dtype), torch.zeros(96, dtype=dtype), 1)
        snake = fused_conv.Snake(torch.zeros(96, dtype=dtype), torch.zeros(96, dtype=dtype))
        x, res = torch.zeros(4, 54 + 256, 96, dtype=dtype), torch.zeros(4, 256, 96, dtype=dtype)
        found += recorded(fused_conv, "_unit_kernel", fused_conv.unit, x, first, snake, second, res)
    return found


def _window_launches() -> list[tuple]:
    """The codec decoder's window attention at the released decoder's heads (16 of 64): a chunk of
    8 frames in bfloat16, and of 1 in float32 (its dots in IEEE precision)."""
    from voicewire.engine.kernels import decoder_window

    found = []
    for dtype, frames in ((torch.bfloat16, 8), (torch.float32, 1)):
        q = torch.zeros(4, frames, 16, 64, dtype=dtype)
        window = torch.zeros(6, 16, 71, 64, dtype=dtype)
        rows = torch.zeros(4, dtype=torch.int64)
        found += recorded(
            decoder_window, "_window_kernel", decoder_window.attend, q, q, q, window, window, rows, rows
        )
    return found


def _launches(pdl: bool) -> list[tuple]:
    from voicewire.engine.config import SamplingParams
    from voicewire.engine.kernels import fused_draw, fused_layer
    from voicewire.engine.model.sampling import RowSampling

    found, b = [], 2
    for dtype, vocab, hidden in (
        (torch.bfloat16, 2048, 1024),
        (torch.bfloat16, 3072, 1024),
        (torch.float32, 96, 64),
    ):
        logits, seed = torch.zeros(b, vocab, dtype=dtype), torch.zeros(b, dtype=torch.long)
        draw = (
            fused_draw,
            "_draw_kernel",
            fused_draw.draw,
            logits,
            RowSampling.uniform(SamplingParams(), b),
            seed,
            seed,
        )
        found += recorded(*draw, 1, table=torch.zeros(vocab, hidden, dtype=dtype), pdl=pdl)
        masks = fused_draw.Masks(
            torch.zeros(b, vocab, dtype=torch.bool), torch.ones(b), torch.zeros(vocab, dtype=torch.bool),
            torch.zeros(b, dtype=torch.bool), vocab - 1,
        )  # fmt: skip
        found += recorded(*draw, masks=masks, pdl=pdl)
    for dtype in (torch.bfloat16, torch.float32):
        for rows in (1, 2):
            x, wide = torch.zeros(rows, 1024, dtype=dtype), torch.zeros(rows, 3072, dtype=dtype)
            gemv = (fused_layer, "_gemv_kernel", fused_layer.gemv)
            q_k_v, gate_up = torch.zeros(4096, 1024, dtype=dtype), torch.zeros(6144, 1024, dtype=dtype)
            found += recorded(*gemv, x, q_k_v, x, x[0], 1e-6, pdl=pdl)
            found += recorded(*gemv, x, gate_up, x, x[0], 1e-6, True, pdl=pdl)
            found += recorded(*gemv, wide, torch.zeros(1024, 3072, dtype=dtype), pdl=pdl)  # down
        # Each of attention_launch's three launches: few programs (these three shapes), 16 rows of
        # 8 key heads and 128 rows (the last two with the whole tables, as the talker's steps).
        for batch, t, span in ((1, 1, 128), (1, 2, 16), (8, 1, 1024), (16, 1, 128), (128, 1, 128)):
            length = 1024 if batch < 16 else span
            qkv, cos = torch.zeros(batch, t, 4096, dtype=dtype), torch.zeros(batch, t, 128)
            positions, norm = torch.zeros(batch, t, dtype=torch.long), torch.ones(128, dtype=dtype)
            cache = torch.zeros(batch, 8, length, 128, dtype=dtype)
            tables = torch.zeros(length, 128)
            for rope in (cos, tables) if batch < 16 else (tables,):  # each row's cos/sin, or the tables
                found += recorded(
                    fused_layer, "_attention_kernel", fused_layer.attend,
                    qkv, norm, norm, 1e-6, rope, rope, positions, cache, cache, span, 16, pdl=pdl,
                )  # fmt: skip
    return found


def main() -> None:
    if os.environ.get("TRITON_INTERPRET"):
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the kernels this compiles")
    for kernel, args, kwargs in launches():
        print(json.dumps(compile_call(kernel, args, dict(kwargs))), flush=True)


if __name__ == "__main__":
    main()
