"""The vllm backend on vLLM's CPU build (its own virtualenv, tests/vllm_env.py): the same codes as
the torch backend, through preemption, cancel and waiting streams, and the version check."""

import math

import numpy as np
import pytest

from tests.vllm_env import run_vllm


def _assert_same_codes(result: dict) -> None:
    assert len(result["torch"]) == len(result["vllm"]) == 4
    for torch_run, vllm_run in zip(result["torch"], result["vllm"], strict=True):
        assert torch_run["error"] is None and vllm_run["error"] is None
        assert vllm_run["reason"] == torch_run["reason"]
        expected, got = np.array(torch_run["codes"]), np.array(vllm_run["codes"])
        assert expected.shape[0] > 40 and expected.shape[1] == 16
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("variant", ["custom_voice", "base"])
def test_codes_equal_the_torch_backend(variant: str) -> None:
    # Four streams at once: dual-track text at once; dual-track pieces with pauses and a flush;
    # non-streaming pieces; a seeded sampled stream. Base: x-vector and in-context voices.
    result, _ = run_vllm("scenarios.py", "codes", variant)
    _assert_same_codes(result)
    reasons = [run["reason"] for run in result["vllm"]]
    assert "end" in reasons  # sequences ended at EOS and the streams at their end


def test_preemption_recomputes_the_same_codes() -> None:
    result, log = run_vllm("scenarios.py", "preempt")
    assert "was preempted" in log  # six KV blocks cannot hold four sequences
    _assert_same_codes(result)


def test_cancel_frees_the_request_and_an_idle_waiting_stream_times_out() -> None:
    result, _ = run_vllm("scenarios.py", "cancel_wait")
    assert result["cancel_reason"] == "cancelled" and result["in_flight_at_cancel"] >= 1
    assert result["wait_reason"] == "error" and result["wait_frames"] > 0
    assert "no text for 1 s" in result["wait_error"] and "free its KV cache" in result["wait_error"]
    assert 1.0 < result["waited_s"] < 10  # from its last text: the 1 s timeout, and not forever
    assert result["requests_in_flight"] == 0 and result["live_streams"] == 0
    # The speech guard's default: 3 s and 0.5 s a token once the text is in (all of it, here).
    expected = math.ceil((3.0 + 0.5 * result["guard_tokens"]) * 12.5)
    assert result["guard_reason"] == "length" and result["guard_frames"] == [expected, expected]


def test_a_wrong_vllm_version_is_refused() -> None:
    result, _ = run_vllm("scenarios.py", "version")
    assert "vLLM 0.31.2 is installed" in result["refused"] and "vllm>=0.32,<0.33" in result["refused"]
