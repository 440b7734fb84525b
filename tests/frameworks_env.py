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
from pathlib import Path

from tests.venvs import REPO, checkout_venv, pip_install, run_script

SCRIPTS = Path(__file__).parent / "integrations"
# What voicewire.client and the plugins import (pyproject's own pins); not torch, not the server.
CLIENT = ["msgpack>=1.0", "numpy>=1.26", "opuslib==3.0.1", "websockets>=13"]


def framework_python(name: str, requirements: list[str]) -> Path:
    """The interpreter of `name`'s virtualenv (building it if needed) with `requirements` and
    voicewire installed from this checkout (editable, so it runs the code under test)."""
    return checkout_venv(
        name,
        requirements + CLIENT,
        lambda python: [[*pip_install(python), *requirements, *CLIENT]],
        "VOICEWIRE_FRAMEWORK_BASE_PYTHON",
    )


def run_framework(python: Path, script: str, *args: str, timeout: float = 300) -> tuple[dict, str]:
    """Run tests/integrations/<script> under `python`; returns (the JSON of its last stdout line,
    its stderr, where the frameworks log)."""
    done = run_script(python, SCRIPTS / script, *args, timeout=timeout, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
