"""`voicewire bench-parts` on the tiny checkpoint: the report's shape and its values (not speed)."""

import json
from pathlib import Path

from voicewire.server.cli import main


def test_bench_parts_reports_every_piece(tmp_path: Path) -> None:
    out = tmp_path / "parts.json"
    argv = ["bench-parts", "--size", "tiny", "--kv-length", "64", "--batches", "1,3", "--positions", "5,40"]
    assert main([*argv, "--decoder-frames", "1,2", "--repeats", "2", "--profile", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["kv_length"] == 64 and report["graphs"] is False
    assert report["step_buckets"] == [1, 3]  # only the batches timed: 2 is not made
    # Prompts of 5 rows attend to an eighth of the KV, prompts of 40 to all of it.
    assert [(s["batch"], s["positions"], s["span"]) for s in report["step"]] == [
        (1, 5, 8),
        (3, 5, 8),
        (1, 40, 64),
        (3, 40, 64),
    ]
    assert all(s["ms"] > 0 for s in report["step"])
    prefill = report["prefill"]
    assert prefill["rows"] == 20 and prefill["sequences"] == 3
    assert 0 < prefill["one_ms"] and 0 < prefill["many_ms"] and 0 < prefill["one_then_first_frame_ms"]
    assert [(d["batch"], d["frames"]) for d in report["decoder"]] == [(1, 1), (1, 2), (3, 1), (3, 2)]
    assert all(d["ms"] > 0 for d in report["decoder"])
    tables = report["profile"]
    assert list(tables) == ["step B=1, span 8", "step B=3, span 8", "decoder B=3 x 2 frames"]
    for table in tables.values():
        assert table["busy_ms"] > 0 and table["kernels"] > len(table["top"]) > 0
        assert sum(k["ms"] for k in table["top"]) <= table["busy_ms"] + 1e-6
