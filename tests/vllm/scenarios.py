"""Scenarios for the vllm backend, run under the vLLM virtualenv (tests/vllm_env.py).

Each prints one JSON line. `codes VARIANT` runs the same four streams through the torch backend and
the vllm backend (concurrently within each) and reports both backends' codes; `preempt` does so with
a KV cache too small for the four; `cancel_wait` cancels one stream and lets another wait for text
past the timeout; `version` starts the backend with a wrong vLLM version.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

import numpy as np

from voicewire.engine import Engine, EngineConfig, EngineError, StreamClosed, StreamOptions
from voicewire.engine.model.random_checkpoint import random_checkpoint

TEXT = "Hello there, how are you today? I hope the weather is fine where you are."
GUARDED = "Hello there."
PAUSE_S = 0.4  # longer than many frames of the tiny model: the streams really wait


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# (layout, how the text goes in, sampling): "once" pushes it all and ends; "pauses" pushes pieces with
# pauses and a flush in the middle (two talker sequences), then ends.
PLANS = [
    ("dual_track", "once", {"greedy": True}),
    ("dual_track", "pauses", {"greedy": True}),
    ("non_streaming", "pauses", {"greedy": True}),
    ("dual_track", "pauses", {"seed": 7}),
]


async def _voices(engine: Engine, variant: str) -> list:
    if variant == "custom_voice":
        return [
            await engine.voice(speaker=s, language="english") for s in ("vivian", "ryan", "eric", "serena")
        ]
    rng = np.random.default_rng(3)
    t = np.arange(24000 * 2) / 24000
    wave = (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)
    return [
        await engine.voice(ref_audio=(wave, 24000)),
        await engine.voice(ref_audio=(wave, 24000), ref_text="A short reference."),
        await engine.voice(ref_audio=(wave, 24000)),
        await engine.voice(ref_audio=(wave, 24000), ref_text="A short reference."),
    ]


async def _run_stream(engine: Engine, voice, layout: str, how: str, sampling: dict, max_frames: int) -> dict:
    stream = engine.open_stream(voice, StreamOptions(layout=layout, max_frames=max_frames, **sampling))
    codes: list[np.ndarray] = []

    async def read() -> None:
        async for chunk in stream:
            codes.append(chunk.codes)

    reader = asyncio.create_task(read())
    try:
        if how == "once":
            stream.push_text(TEXT)
        else:
            pieces = _pieces(TEXT, 9)
            for i, piece in enumerate(pieces):
                stream.push_text(piece)
                if i == len(pieces) // 2:
                    stream.flush()
                await asyncio.sleep(PAUSE_S if i % 3 == 0 else 0.02)
        stream.end()
    except StreamClosed:
        pass  # it reached max_frames while text was still coming: the rest could not change its codes
    await reader
    result = await stream.wait()
    return {
        "codes": np.concatenate(codes).tolist() if codes else [],
        "reason": result.reason,
        "error": None if result.error is None else str(result.error),
    }


async def _all(engine: Engine, variant: str, max_frames: int) -> list[dict]:
    voices = await _voices(engine, variant)
    return await asyncio.gather(
        *(
            _run_stream(engine, voice, layout, how, sampling, max_frames)
            for voice, (layout, how, sampling) in zip(voices, PLANS, strict=True)
        )
    )


def codes(variant: str, **vllm: object) -> dict:
    kv_length = int(vllm.pop("kv_length", 96))  # type: ignore[call-overload]
    max_frames = int(vllm.pop("max_frames", 150))  # type: ignore[call-overload]
    model = str(random_checkpoint(variant))
    out = {}
    for backend in ("torch", "vllm"):
        config = EngineConfig.from_dict(
            {"model": model, "backend": backend, "max_streams": 4, "kv_length": kv_length, "vllm": dict(vllm)}
        )
        with Engine.from_config(config) as engine:
            out[backend] = asyncio.run(_all(engine, variant, max_frames))
    return out


def cancel_wait() -> dict:
    config = EngineConfig.from_dict(
        {
            "model": "tiny",
            "backend": "vllm",
            "max_streams": 4,
            "kv_length": 256,
            "vllm": {"waiting_timeout_s": 1.0},
        }
    )
    with Engine.from_config(config) as engine:
        scheduler = engine.scheduler

        async def run() -> dict:
            voice = await engine.voice(speaker="vivian", language="english")
            waiting = engine.open_stream(voice, StreamOptions(greedy=True))
            waiting.push_text("Hello there, how are")  # no end: it speaks, then waits for more
            # Its wait for text starts while the other stream runs, so time it from here: measured
            # from after the cancel, a slow machine saw it end 0.46 s later, a second timeout early.
            t0 = time.monotonic()
            cancelled = engine.open_stream(voice, StreamOptions(greedy=True, max_frames=2000))
            cancelled.push_text(TEXT * 3)
            cancelled.end()
            chunks, in_flight = 0, 0
            async for _ in cancelled:
                chunks += 1
                if chunks == 3:
                    in_flight = scheduler.requests_in_flight
                    cancelled.cancel()
            cancel_result = await cancelled.wait()
            waited_chunks = 0
            error = None
            try:
                async for _ in waiting:
                    waited_chunks += 1
            except EngineError as exc:
                error = str(exc)
            wait_result = await waiting.wait()
            waited = time.monotonic() - t0
            # The random checkpoint never says EOS: the speech guard ends the sequence.
            guarded = engine.open_stream(voice, StreamOptions(seed=3, layout="non_streaming"))
            guarded.push_text(GUARDED)
            guarded.end()
            guarded_frames = sum([chunk.frames async for chunk in guarded])
            guard_result = await guarded.wait()
            deadline = time.monotonic() + 10
            while scheduler.requests_in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return {
                "guard_reason": guard_result.reason,
                "guard_frames": [guard_result.frames, guarded_frames],
                "guard_tokens": len(engine.model.tokenizer.encode(GUARDED)),
                "cancel_reason": cancel_result.reason,
                "cancel_frames": cancel_result.frames,
                "wait_reason": wait_result.reason,
                "wait_error": error,
                "wait_frames": wait_result.frames,
                "waited_s": waited,
                "in_flight_at_cancel": in_flight,
                "requests_in_flight": scheduler.requests_in_flight,
                "live_streams": engine.live_streams,
            }

        return asyncio.run(run())


def version() -> dict:
    import vllm

    from voicewire.engine.vllm import VllmUnavailable

    vllm.__version__ = "0.31.2"
    try:
        Engine.from_config(EngineConfig(model="tiny", backend="vllm"))
    except VllmUnavailable as exc:
        return {"refused": str(exc)}
    return {"refused": None}


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    name, *args = sys.argv[1:]
    if name == "codes":
        result = codes(args[0])
    elif name == "preempt":
        # 6 blocks of 32 positions: 160 for one sequence, too few for four of about 70 each.
        result = codes("custom_voice", kv_length=160, max_frames=56, num_blocks=6)
    elif name == "cancel_wait":
        result = cancel_wait()
    elif name == "version":
        result = version()
    else:
        raise SystemExit(f"unknown scenario {name}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
