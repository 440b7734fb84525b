"""Programmatic dependent launch (Hopper and later) for the engine's Triton kernels.

At one stream a frame is hundreds of small kernels in a row, and each pays the gap between one
kernel's end and the next one's start. Launched this way, a kernel may start while the one before
it is still running: it loads what no earlier kernel writes (its weights) first, then waits at
`gdc_wait` until the previous kernel has finished and its writes are visible, then lets the next
kernel start (`gdc_launch_dependents`). So at most two kernels overlap, and the second one's weight
reads hide behind the first one's work. Every kernel launched this way must wait before it reads
or writes anything another kernel touches.

On by default on Hopper and later: on an H100 it took the one-stream frame step from 3.49 to
3.06 ms (docs/log/2026-11.md, "Programmatic dependent launch"). `VOICEWIRE_PDL=0` turns it
off, a switch for A/Bs and for drivers that mishandle it; the choice is made once, in
`Kernels.resolve` (engine/kernels/choice.py), and reaches each launch as its `pdl` argument.
"""

from __future__ import annotations


def launch_options(on: bool) -> dict[str, object]:
    """Keyword arguments for a Triton launch whose kernel takes a `PDL` constexpr: the constant, and
    the launch attribute when it is on."""
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}
