"""Virtualenvs of their own for tools that cannot share ours (the official qwen-tts, vLLM's CPU
build): built once under the cache folder, keyed by what they install, and scripts run in them."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from voicewire.engine.model.random_checkpoint import cache_root

REPO = Path(__file__).resolve().parent.parent
# Tests never reach a hub; tokenizers' thread pool only adds noise to two cores.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def venv_folder(name: str, requirements: list[str]) -> Path:
    """Where the virtualenv for `requirements` lives (a new folder when they change)."""
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    return cache_root() / f"{name}-venv-{key}"


def run_steps(what: str, steps: list[list[str]]) -> None:
    """Run build commands in order; the first failure raises with its stderr."""
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the {what} venv failed at {' '.join(cmd)}:\n{done.stderr[-4000:]}")


def run_script(
    python: Path,
    script: Path,
    *args: str,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `script` under `python` with the offline environment; a failure raises with both outputs."""
    environment = {**os.environ, **OFFLINE, **(env or {})}
    environment.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=cwd,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def pip_install(python: Path) -> list[str]:
    return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]


_pointed: set[Path] = set()


def checkout_venv(
    name: str,
    key: list[str],
    build: Callable[[Path], list[list[str]]],
    base_env: str,
    with_dependencies: str | None = None,
) -> Path:
    """The interpreter of a venv keyed by `key` (a new folder when it changes), built once by the
    commands `build(python)` gives, with voicewire installed from this checkout (editable, so it
    runs the code under test; pointed again at this checkout once per process, as a cached venv
    may point at another). Without its dependencies, unless `with_dependencies` names the extras
    to install it with (`dev`): then they are installed again whenever pyproject.toml changes, so
    a venv cached before a new dependency gets it. `base_env` names the variable that may give
    the Python to build it with."""
    venv = venv_folder(name, key)
    python = venv / "bin" / "python"
    stamp = venv / ".complete"
    steps: list[list[str]] = []
    if not stamp.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        base = os.environ.get(base_env, "python3")
        steps += [[base, "-m", "venv", "--clear", str(venv)], *build(python)]
    dependencies = venv / ".voicewire-dependencies"
    wanted = _dependencies() if with_dependencies else ""
    if with_dependencies and (not dependencies.exists() or dependencies.read_text() != wanted):
        steps.append([*pip_install(python), "-e", f"{REPO}[{with_dependencies}]"])
    elif venv not in _pointed:
        steps.append([*pip_install(python), "--no-deps", "-e", str(REPO)])
    run_steps(name, steps)
    stamp.touch()
    if with_dependencies:
        dependencies.write_text(wanted)
    _pointed.add(venv)
    return python


def _dependencies() -> str:
    """What pyproject.toml says, as it stands in this checkout (its dependency lists among it)."""
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
