import gzip
import json
from pathlib import Path

import pytest

from voicewire.bench.trace import family, summarize, summarize_file


def _op(tid: int, name: str, ts: float, dur: float, cat: str = "cpu_op", pid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


EVENTS = [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "talker"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    # Thread 11: a step with two ops nested in it, then a second step; 100 + 50 µs busy.
    _op(11, "step", 0, 100),
    _op(11, "aten::mm", 10, 30),
    _op(11, "aten::add", 50, 20),
    _op(11, "step", 200, 50),
    # Thread 12 (no name): one op.
    _op(12, "aten::conv1d", 20, 40),
    # Stream 7: kernels 0-10, 12-20 (a 2 µs spacing, no gap), 100-130 (a 80 µs gap).
    _op(7, "triton_poi_fused_mul_silu_1", 0, 10, "kernel", pid=0),
    _op(7, "triton_poi_fused_mul_silu_0", 12, 8, "kernel", pid=0),
    _op(7, "attention", 100, 30, "kernel", pid=0),
    # Stream 9: a copy overlapping stream 7's first kernel, then a kernel after a 25 µs gap.
    _op(9, "Memcpy HtoD", 5, 10, "gpu_memcpy", pid=0),
    _op(9, "conv", 40, 100, "kernel", pid=0),
    {"ph": "X", "cat": "python_function", "name": "ignored", "pid": 1, "tid": 11, "ts": 0, "dur": 1000},
    {"ph": "i", "cat": "cpu_op", "name": "instant", "pid": 1, "tid": 11, "ts": 5},
]


def test_summarize_counts_each_interval_once() -> None:
    report = summarize(EVENTS)
    assert report["span_ms"] == 0.25  # 0 .. 250 µs, the talker's second step
    talker, other = report["threads"]
    assert talker == {
        "thread": "talker",
        "ops": 4,
        "busy_ms": 0.15,
        "busy_share": 0.6,
        "top": [{"name": "step", "count": 2, "ms": 0.15}],  # the nested ops are inside the steps
    }
    assert other["thread"] == "12" and other["busy_ms"] == 0.04
    gpu = report["gpu"]
    # 0-20 (stream 7 and the copy), 40-140 (the conv and the attention): 120 µs.
    assert gpu["busy_ms"] == 0.12 and gpu["busy_share"] == 0.48
    conv_stream, stream7 = gpu["streams"]
    assert stream7["stream"] == "stream 7" and stream7["events"] == 3 and stream7["busy_ms"] == 0.048
    assert stream7["gaps"] == {"count": 1, "ms": 0.08, "p50_us": 80.0, "max_us": 80.0}
    assert stream7["top"] == [
        {"name": "attention", "count": 1, "ms": 0.03},
        {"name": "triton_poi_fused_mul_silu", "count": 2, "ms": 0.018},
    ]
    assert conv_stream["stream"] == "device 0 stream 9" and conv_stream["busy_ms"] == 0.11
    assert conv_stream["gaps"] == {"count": 1, "ms": 0.025, "p50_us": 25.0, "max_us": 25.0}


def test_summarize_without_gpu_and_without_events() -> None:
    assert "gpu" not in summarize([_op(3, "aten::mm", 0, 10)])
    with pytest.raises(ValueError, match="no CPU ops and no GPU kernels"):
        summarize([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "x"}}])


def test_summarize_file_reads_plain_and_gzipped(tmp_path: Path) -> None:
    plain, zipped = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps({"traceEvents": EVENTS}))
    with gzip.open(zipped, "wt") as f:
        json.dump({"traceEvents": EVENTS}, f)
    assert summarize_file(plain) == summarize_file(zipped) == summarize(EVENTS)


def test_family_drops_what_varies_between_instances() -> None:
    assert (
        family("triton_per_fused__fused_rms_norm__to_copy_add_mul_12")
        == "triton_per_fused__fused_rms_norm__to_copy_add_mul"
    )
    assert family("nvjet_sm90_tst_64x32_64x16_4x2_h_bz_TNT") == "nvjet (cuBLAS GEMM)"
    assert family(
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel>(int, F)"
    ) == ("void at::native::index_elementwise_kernel")
    assert family("_conv_kernel") == "_conv_kernel" and family("aten::conv1d") == "aten::conv1d"
