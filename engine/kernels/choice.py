"""Which kernels the model runs: one value, decided once when the engine starts.

`Kernels.resolve` reads the engine's settings, the device and the environment (here, and nowhere
else in the engine) and gives a frozen `Kernels`. The engine hands it to the model's parts that
launch kernels (`bind`) before any CUDA graph is captured: the talker's and the code predictor's
layers, the code predictor's draws, the frame step's code-0 draw and the codec decoder. Each part
holds the value as a field and reads it where it chooses a kernel; parts built and never bound
(offline synthesis, the vLLM worker's talker parts, tests) hold `Kernels()`, every kernel off:
eager PyTorch, as on a CPU.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

from voicewire.engine.kernels import pointwise

if TYPE_CHECKING:
    from voicewire.engine.config import EngineConfig

log = logging.getLogger(__name__)

Fn = TypeVar("Fn", bound=Callable)

# `VOICEWIRE_PDL=0` turns programmatic dependent launch off (A/Bs; drivers that mishandle it);
# `VOICEWIRE_PDL=all` also launches the torch.compile'd pieces' kernels this way (on trial).
PDL_ENV = "VOICEWIRE_PDL"


@dataclass(frozen=True)
class Kernels:
    """Every kernel choice, on or off. The default is all off: plain PyTorch, as on a CPU."""

    compiled: bool = False  # `@pointwise.fusable` functions run torch.compile'd (engine.pointwise)
    # Decoder layers of a few rows, and decode attention at any batch, in Triton (engine.fused_layer).
    fused_layer: bool = False
    # Each token draw, with the next step's embedding row, in one Triton kernel (engine.fused_draw).
    fused_draw: bool = False
    fused_snake: bool = False  # the codec decoder's SnakeBeta in one Triton kernel (engine.fused_snake)
    fused_conv: bool = False  # the codec decoder's dense convs as Triton implicit GEMMs (engine.fused_conv)
    # The codec decoder's window attention in one Triton kernel per layer (engine.decoder_window).
    fused_window: bool = False
    # The decoder's narrowest residual units in one kernel each, where their convs run as
    # engine.fused_conv's kernel (engine.fused_conv.unit).
    fused_unit: bool = False
    pdl: bool = False  # Triton kernels launch with programmatic dependent launch (engine.pdl)
    # So do the compiled pieces' kernels (Inductor's `triton.enable_pdl`; on trial, VOICEWIRE_PDL=all):
    # at 256 streams a step runs ~1,100 kernels of ~5 us, three a layer Inductor's norms and SiLU.
    pdl_compiled: bool = False

    @classmethod
    def resolve(cls, config: EngineConfig, device: torch.device) -> Kernels:
        """The engine's kernels on `device`: on CUDA, `fuse_kernels` turns on the compiled pieces,
        the fused layer and the activation kernel, `fused_draw` the draw kernel, `fused_conv` the
        decoder's conv kernel, `fused_unit` with `fused_conv` its narrow residual units as one
        kernel each, `fused_window` its attention kernel, and programmatic dependent
        launch is on for Hopper and later unless VOICEWIRE_PDL=0 or Triton runs interpreted
        (TRITON_INTERPRET), for the compiled pieces too with VOICEWIRE_PDL=all where Inductor has
        the switch (`pointwise.inductor_has_pdl`). Elsewhere
        everything is off."""
        if device.type != "cuda":
            return cls()
        fuse = config.fuse_kernels
        pdl = _pdl_wanted() and pdl_supported(device)
        return cls(
            compiled=fuse,
            fused_layer=fuse,
            fused_draw=config.fused_draw,
            fused_conv=config.fused_conv,
            fused_window=config.fused_window,
            fused_unit=config.fused_conv and config.fused_unit,
            fused_snake=fuse,
            pdl=pdl,
            pdl_compiled=pdl and fuse and os.environ.get(PDL_ENV) == "all" and pointwise.inductor_has_pdl(),
        )

    def fuse(self, fn: Fn) -> Fn:
        """`fn`, a `@pointwise.fusable` function, compiled when `compiled` is on, else as it is."""
        return pointwise.compiled(fn, pdl=self.pdl_compiled) if self.compiled else fn

    def bind(self, *roots: nn.Module) -> None:
        """Give this value to every module under `roots` that holds one (a `kernels` field)."""
        for root in roots:
            for module in root.modules():
                if isinstance(getattr(module, "kernels", None), Kernels):
                    # A plain attribute, set in the module's __init__ (nn.Module's __setattr__ is
                    # typed for tensors and modules only).
                    vars(module)["kernels"] = self
        log.info("kernels: %s", self)


def _pdl_wanted() -> bool:
    """Whether the environment allows programmatic dependent launch: not turned off with
    VOICEWIRE_PDL=0, and Triton not in its interpreter (which has no launch attributes)."""
    return os.environ.get(PDL_ENV, "1") != "0" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def pdl_supported(device: torch.device) -> bool:
    """Whether the CUDA `device` can launch this way: compute capability 9.0 (Hopper) or later."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability_at_least_9(index)


@functools.cache
def _capability_at_least_9(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)
