"""bench.machine: a machine's speed now, which scripts/ab_servers.sh writes beside each server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from voicewire.bench import machine


def test_the_host_s_python_rate_is_measured_over_its_time() -> None:
    rate = machine.python_loops_per_s(seconds=0.05)
    # A 2-core CI machine runs some tens of millions of these iterations a second; anything
    # between a tenth of a million and a billion is a measurement, not a unit slip.
    assert 0.1 < rate < 1000


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
    assert report["python_mloops_per_s"] > 0.1
    assert report["device"] == (torch.cuda.get_device_name() if gpu else "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU's figures need CUDA")
def test_the_gpu_figures() -> None:
    report = machine.probe()
    assert report["device"] == torch.cuda.get_device_name()
    # An H100 or H200: hundreds of bf16 TFLOP/s, terabytes a second, a launch in microseconds.
    assert 50 < report["gemm_bf16_tflops"] < 2000  # type: ignore[operator]
    assert 300 < report["copy_gb_per_s"] < 10_000  # type: ignore[operator]
    assert 0.5 < report["launch_us"] < 100  # type: ignore[operator]
