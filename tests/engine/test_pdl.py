"""When the Triton kernels launch with programmatic dependent launch (engine.pdl). That they wait
and let the next kernel start is checked in their compiled code (test_triton_kernels)."""

import pytest
import torch

from voicewire.engine import pdl


def test_off_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICEWIRE_PDL", "1")
    assert not pdl.enabled(torch.device("cpu"))
    assert pdl.launch_options(torch.device("cpu")) == {"PDL": False}


@pytest.mark.parametrize(("name", "value"), [("VOICEWIRE_PDL", "0"), ("TRITON_INTERPRET", "1")])
def test_off_when_asked_or_interpreted(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Decided before the device is asked anything: this machine has no CUDA device."""
    monkeypatch.setenv("VOICEWIRE_PDL", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(name, value)
    assert pdl.launch_options(torch.device("cuda", 0)) == {"PDL": False}


@pytest.mark.parametrize("switch", [None, "1"])
def test_on_for_hopper_and_later(monkeypatch: pytest.MonkeyPatch, switch: str | None) -> None:
    """On by default, as with VOICEWIRE_PDL=1."""
    if switch is None:
        monkeypatch.delenv("VOICEWIRE_PDL", raising=False)
    else:
        monkeypatch.setenv("VOICEWIRE_PDL", switch)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    capabilities = {0: (8, 0), 1: (9, 0), 2: (10, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capabilities[index])
    pdl._hopper_or_later.cache_clear()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    try:
        assert [pdl.enabled(torch.device("cuda", i)) for i in range(3)] == [False, True, True]
        assert pdl.launch_options(torch.device("cuda")) == {"PDL": True, "launch_pdl": True}
    finally:
        pdl._hopper_or_later.cache_clear()
