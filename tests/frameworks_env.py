"""Voice-agent frameworks (Pipecat, LiveKit Agents) in virtualenvs of their own, built on first use
and cached, for the plugins' tests (docs/integrations.md).

Each framework pins packages ours cannot share (LiveKit Agents wants openai 2, our dev tools pin
openai 3), so each gets a venv keyed by its pins, with voicewire installed from this checkout
without its engine's dependencies: a plugin is a client, and needs only the wire's packages. The
scripts in tests/integrations/<name>/ run under that interpreter against a real `voicewire serve`
and print one JSON line of what they saw.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.venvs import run_script, run_steps, venv_folder

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).parent / "integrations"
# What voicewire.client and the plugins import (pyproject's own pins); not torch, not the server.
CLIENT = ["msgpack>=1.0", "numpy>=1.26", "opuslib==3.0.1", "websockets>=13"]
_pointed: set[str] = set()


def framework_python(name: str, requirements: list[str]) -> Path:
    """The interpreter of `name`'s virtualenv (building it if needed) with `requirements` and
    voicewire installed from this checkout (editable, so it runs the code under test)."""
    venv = venv_folder(name, requirements + CLIENT)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    stamp = venv / ".complete"
    steps: list[list[str]] = []
    if not stamp.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        base = os.environ.get("VOICEWIRE_FRAMEWORK_BASE_PYTHON", "python3")
        steps += [[base, "-m", "venv", "--clear", str(venv)], [*pip, *requirements, *CLIENT]]
    if name not in _pointed:  # the cached venv may point at another checkout
        steps.append([*pip, "--no-deps", "-e", str(REPO)])
    run_steps(name, steps)
    stamp.touch()
    _pointed.add(name)
    return python


def run_framework(python: Path, script: str, *args: str, timeout: float = 300) -> tuple[dict, str]:
    """Run tests/integrations/<script> under `python`; returns (the JSON of its last stdout line,
    its stderr, where the frameworks log)."""
    done = run_script(python, SCRIPTS / script, *args, timeout=timeout, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
