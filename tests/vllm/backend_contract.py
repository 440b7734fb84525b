"""The talker-backend contract's checks (tests/engine/backend_contract.py) on the vllm backend, run
under the vLLM virtualenv (tests/vllm_env.py) on the built-in tiny checkpoint. One backend serves
every check (vLLM takes a while to start); prints one JSON line: each check's name -> null when it
passed, else its traceback."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

# The checkout, for the `tests` package: a script's own folder is all Python puts on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine.backend_contract import CHECKS, Kit, Recorder, config, running
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.random_checkpoint import random_checkpoint
from voicewire.engine.vllm.scheduler import VllmScheduler


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    model = Qwen3TTS.load(str(random_checkpoint("custom_voice")))
    sink = Recorder()
    results: dict[str, str | None] = {}
    with running(VllmScheduler(model.parts(), model.folder, config(model, "vllm"), sink, None)) as backend:
        kit = Kit(backend, sink, model)
        for name, check in CHECKS.items():
            try:
                check(kit)
                results[name] = None
            except Exception:
                results[name] = traceback.format_exc()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
