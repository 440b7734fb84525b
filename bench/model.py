"""The model a benchmark runs and its engine's settings, as the benchmark commands' shared flags
give them: a profile with the flags over it, and a random checkpoint unless one is named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # voicewire.engine brings torch, which `voicewire bench`'s client processes do without
    from voicewire.engine.config import EngineConfig


@dataclass(frozen=True)
class BenchModel:
    model: str | None = None  # checkpoint folder, repo id or 'tiny'; None: a random one of `size`
    size: str = "tiny"  # random checkpoint size: tiny, 0.6b or 1.7b
    profile: Path | None = None  # engine profile YAML (configs/*.yaml)
    device: str = "cpu"
    dtype: str = "float32"
    kv_length: int | None = None  # talker KV positions per stream; None: the profile's
    eager: bool = False  # no CUDA graphs and no fused kernels (for comparison)

    def engine_config(self, max_streams: int, variant: str = "custom_voice") -> EngineConfig:
        """The engine's settings for `max_streams` streams; a random checkpoint of `variant` unless
        `model` names one."""
        from voicewire.engine import EngineConfig
        from voicewire.engine.model.random_checkpoint import random_checkpoint

        overrides: dict[str, Any] = {"device": self.device, "dtype": self.dtype, "max_streams": max_streams}
        overrides["model"] = self.model or str(random_checkpoint(variant, self.size))
        if self.kv_length:
            overrides["kv_length"] = self.kv_length
        if self.eager:
            overrides["cuda_graphs"] = overrides["fuse_kernels"] = False
        if self.profile:
            return EngineConfig.from_yaml(self.profile, **overrides)
        return EngineConfig.from_dict(overrides)
