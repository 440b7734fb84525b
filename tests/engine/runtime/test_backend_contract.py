"""The talker-backend contract (engine/runtime/backend.py), one suite for both backends: the checks in
tests/engine/backend_contract.py, on the torch backend in this process and on the vllm backend
under vLLM's CPU build (tests/vllm/backend_contract.py: one run serves every check, as vLLM takes
a while to start)."""

from collections.abc import Iterator

import pytest

from tests.engine.backend_contract import CHECKS, Kit, Recorder, config, running
from tests.vllm_env import run_vllm
from voicewire.engine.runtime.scheduler import Scheduler


@pytest.fixture(scope="module")
def torch_kit(tiny_models) -> Iterator[Kit]:
    model = tiny_models["custom_voice"]
    sink = Recorder()
    with running(Scheduler(model.parts(), config(model, "torch"), sink, None)) as backend:
        yield Kit(backend, sink, model)


@pytest.fixture(scope="module")
def vllm_failures() -> dict[str, str | None]:
    failures, _ = run_vllm("backend_contract.py")
    return failures


@pytest.mark.parametrize("backend", ["torch", "vllm"])
@pytest.mark.parametrize("check", list(CHECKS))
def test_the_backend_keeps_the_contract(backend: str, check: str, request: pytest.FixtureRequest) -> None:
    if backend == "torch":
        CHECKS[check](request.getfixturevalue("torch_kit"))
    else:
        failure = request.getfixturevalue("vllm_failures")[check]
        assert failure is None, failure
