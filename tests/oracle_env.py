"""The official qwen-tts package in a virtualenv of its own, built on first use and cached.

qwen-tts pins transformers 4.57.3, so it cannot share our environment. Its scripts in
tests/oracle/ run under this interpreter and exchange data with the tests through files.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

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


def _cache_root() -> Path:
    return Path(os.environ.get("VOICEWIRE_CACHE", Path.home() / ".cache" / "voicewire"))


def oracle_python() -> Path:
    """Path to the oracle interpreter, creating the virtualenv if needed."""
    key = hashlib.sha256("\n".join(REQUIREMENTS + NO_DEPS).encode()).hexdigest()[:12]
    venv = _cache_root() / f"oracle-venv-{key}"
    python = venv / "bin" / "python"
    stamp = venv / ".complete"
    if stamp.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = os.environ.get("VOICEWIRE_ORACLE_BASE_PYTHON", "python3")
    steps = [
        [base, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", *NO_DEPS],
        [str(python), str(ORACLE_DIR / "official.py"), "--check"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the oracle venv failed at {' '.join(cmd)}:\n{done.stderr[-4000:]}")
    stamp.touch()
    return python


def run_oracle(script: str, *args: str, timeout: float = 900) -> str:
    """Run tests/oracle/<script> under the oracle interpreter; returns its stdout."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        [str(oracle_python()), str(ORACLE_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:])
        raise RuntimeError(f"oracle script {script} failed:\n{done.stderr[-6000:]}")
    return done.stdout
