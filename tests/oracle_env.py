"""The official qwen-tts package in a virtualenv of its own, built on first use and cached.

qwen-tts pins transformers 4.57.3, so it cannot share our environment. Its scripts in
tests/oracle/ run under this interpreter and exchange data with the tests through files.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.venvs import run_script, run_steps, venv_folder

ORACLE_DIR = Path(__file__).parent / "oracle"

# qwen-tts itself is installed without its dependencies: gradio is only used by its demo, and
# PyPI has no torchaudio for torch 2.13; 2.11's compiled parts do not load beside it, so
# official.py imports only its pure-Python parts. sox and onnxruntime are imported at module level.
REQUIREMENTS = [
    "sox",
    "onnxruntime",
    "torch==2.13.0",
    "transformers==4.57.3",
    "accelerate==1.12.0",
    "librosa==0.11.0",
    "soundfile",
    "einops",
    "numpy<2.4",
    "safetensors",
]
NO_DEPS = ["qwen-tts==0.1.1", "torchaudio==2.11.0"]


def oracle_python() -> Path:
    """Path to the oracle interpreter, creating the virtualenv if needed."""
    venv = venv_folder("oracle", REQUIREMENTS + NO_DEPS)
    python = venv / "bin" / "python"
    stamp = venv / ".complete"
    if stamp.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = os.environ.get("VOICEWIRE_ORACLE_BASE_PYTHON", "python3")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run_steps(
        "oracle",
        [
            [base, "-m", "venv", "--clear", str(venv)],
            [*pip, *REQUIREMENTS],
            [*pip, "--no-deps", *NO_DEPS],
            [str(python), str(ORACLE_DIR / "official.py"), "--check"],
        ],
    )
    stamp.touch()
    return python


def run_oracle(script: str, *args: str, timeout: float = 900) -> str:
    """Run tests/oracle/<script> under the oracle interpreter; returns its stdout."""
    return run_script(oracle_python(), ORACLE_DIR / script, *args, timeout=timeout).stdout
