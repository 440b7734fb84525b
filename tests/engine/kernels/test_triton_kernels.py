"""The engine's Triton kernels compile for a Hopper GPU (sm_90), as the engine launches them, on
this machine without one: the interpreter tests check their arithmetic, this checks that the GPU
compiler takes them (tests/triton_aot.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_launch_compiles_for_hopper() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton's default, stated: unset, Triton 3.9 warns
    done = subprocess.run(
        [sys.executable, "-m", "tests.triton_aot"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    launches = [json.loads(line) for line in done.stdout.splitlines()]
    # The activation: 2 dtypes x 2 tiles x (after a context, with a pending bias); the fast sine in
    # bfloat16 only.
    snakes = [d for d in launches if d["kernel"] == "_snake_kernel"]
    assert len(snakes) == 8 and not any(d["launch_pdl"] for d in snakes)
    assert {(d["FAST_SIN"], d["BLOCK_T"], d["CONTEXT"], d["HAS_BIAS"]) for d in snakes} == {
        (fast, block_t, context, bias)
        for fast in (True, False)
        for block_t in (128, 16)
        for context, bias in ((54, False), (0, True))
    }
    # The decoder's conv: each of fused_conv.tiles' five tiles, and float32 in the widest.
    convs = [d for d in launches if d["kernel"] == "_conv_kernel"]
    assert not any(d["launch_pdl"] for d in convs)
    assert {(d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["num_warps"], d["num_stages"]) for d in convs} == {
        (128, 128, 32, 8, 4),
        (128, 64, 64, 4, 3),
        (64, 128, 64, 4, 3),
        (128, 128, 64, 8, 3),
        (128, 256, 64, 8, 3),
    }
    assert [d["HAS_RES"] for d in convs] == [False, True, True, False, False, False]
    assert [d["IEEE"] for d in convs] == [False] * 5 + [True]
    # A residual unit in one kernel: bfloat16 with the fast sine, float32 with the precise one.
    units = [d for d in launches if d["kernel"] == "_unit_kernel"]
    assert [(d["FAST_SIN"], d["IEEE"], d["BLOCK_M"], d["BLOCK_C"], d["BLOCK_K"]) for d in units] == [
        (True, False, 128, 128, 32),
        (False, True, 128, 128, 32),
    ]
    # The decoder's window attention: bfloat16 and float32, keys of 71 carried + 16 new in 128 slots.
    windows = [d for d in launches if d["kernel"] == "_window_kernel"]
    assert [(d["IEEE"], d["BLOCK_L"], d["BLOCK_Q"], d["PAST"]) for d in windows] == [
        (False, 128, 16, 71),
        (True, 128, 16, 71),
    ]
    unfused = ("_snake_kernel", "_conv_kernel", "_unit_kernel", "_window_kernel")
    launches = [d for d in launches if d["kernel"] not in unfused]
    kernels = [launch["kernel"] for launch in launches]
    # Each set twice, launched one after another and with programmatic dependent launch. Draw:
    # 3 vocabularies x (with an embedding table, with masks); gemv: 2 dtypes x 2 row counts x 3
    # projections; attention: 2 dtypes x (3 shapes x (RoPE rows, RoPE tables) + 2 shapes with tables).
    assert kernels.count("_draw_kernel") == 12 and kernels.count("_gemv_kernel") == 24
    assert kernels.count("_attention_kernel") == 32
    # attention_launch's three launches: (keys a block, warps, stages).
    assert {(d["BLOCK_L"], d["num_warps"], d["num_stages"]) for d in launches if "BLOCK_L" in d} == {
        (64, 4, 3),
        (16, 4, 3),
        (32, 1, 3),
        (16, 1, 2),
    }
    assert {d["ROPE_TABLES"] for d in launches if "ROPE_TABLES" in d} == {True, False}
    # With it, each kernel waits for the previous one and lets the next start (engine.pdl).
    plain, chained = launches[: len(launches) // 2], launches[len(launches) // 2 :]
    assert not any(d["PDL"] or d["launch_pdl"] or d["waits"] or d["launches_dependents"] for d in plain)
    assert all(d["PDL"] and d["launch_pdl"] and d["waits"] and d["launches_dependents"] for d in chained)
    assert {(d["BLOCK_V"], d["HAS_TABLE"], d["HAS_MASKS"]) for d in launches if "BLOCK_V" in d} == {
        (v, table, not table) for v in (2048, 4096, 128) for table in (True, False)
    }
    assert all(launch["cubin_bytes"] > 0 for launch in launches)
