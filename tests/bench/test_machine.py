"""bench.machine: a machine's speed now, which scripts/ab_servers.sh writes beside each server."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from voicewire.bench import machine


def test_the_host_s_python_rate_is_its_iterations_over_the_time_they_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a clock that moves 0.1 s a reading (starting at 0), a 0.25 s probe runs the loop (10,000
    iterations) after the readings 0.1 and 0.2, stops at 0.3 and times itself at 0.4: 20,000
    iterations in 0.4 s."""
    readings = iter(0.1 * i for i in range(10))
    monkeypatch.setattr(machine.time, "perf_counter", lambda: next(readings))
    assert machine.python_loops_per_s(seconds=0.25) == pytest.approx(20_000 / 0.4 / 1e6)


def test_the_probe_prints_one_json_line() -> None:
    """The host's figure, and the GPU's where there is CUDA (none in CI)."""
    done = subprocess.run(
        [sys.executable, "-m", "voicewire.bench.machine"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout)
    gpu = {"gemm_bf16_tflops", "copy_gb_per_s", "launch_us"} if torch.cuda.is_available() else set()
    assert set(report) == {"at", "python_mloops_per_s", "device"} | gpu
    assert report["python_mloops_per_s"] > 0
    assert report["device"] == (torch.cuda.get_device_name() if gpu else "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU's figures need CUDA")
def test_the_gpu_figures() -> None:
    report = machine.probe()
    assert report["device"] == torch.cuda.get_device_name()
    for key in ("gemm_bf16_tflops", "copy_gb_per_s", "launch_us"):
        value = report[key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, key
