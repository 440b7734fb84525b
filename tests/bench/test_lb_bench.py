"""scripts/lb_bench.py end to end on CPU: two servers of `configs/cpu.yaml` behind Debian's HAProxy
(scripts/setup_test_tools.sh installs it), `voicewire bench` through it, then each server alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.serve import free_port, free_ports
from voicewire.engine.runtime.stream import SAMPLE_RATE, SAMPLES_PER_FRAME

ROOT = Path(__file__).resolve().parents[2]
FRAMES = 12
FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # 80 ms of audio a frame of codes


def test_lb_bench_balances_two_servers_and_runs_each_alone(tmp_path: Path) -> None:
    base, lb, stats = free_ports(2), free_port(), free_port()
    out = tmp_path / "out"
    # The haproxy on PATH (Debian puts it in /usr/sbin, which a user's PATH may lack), not .debs.
    env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin"}
    command = [
        sys.executable, str(ROOT / "scripts" / "lb_bench.py"), "configs/cpu.yaml", "2", str(out),
        "--streams", "4", "--frames", str(FRAMES), "--sessions", "2", "--debs", str(tmp_path / "no-debs"),
        "--base-port", str(base), "--lb-port", str(lb), "--stats-port", str(stats),
        "--ready-by", "240", "--deadline", "400",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=480)
    log = (out / "lb_bench.log").read_text() if (out / "lb_bench.log").exists() else done.stderr
    assert done.returncode == 0, log[-4000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "balance.json", "bench.json", "bench.md", "haproxy.log", "lb_bench.log", "metrics.txt",
        "serve.log", "solo.json",
    ]  # fmt: skip

    level = json.loads((out / "bench.json").read_text())["levels"][0]
    assert (level["streams"], level["sessions_per_stream"], level["frames_per_stream"]) == (4, 2, FRAMES)
    assert level["aggregate_audio_s_per_s"] > 0

    balance = json.loads((out / "balance.json").read_text())
    servers = balance["balanced"]["servers"]
    assert sorted(servers) == ["gpu0", "gpu1"]
    assert sum(s["sessions_opened"] for s in servers.values()) == 8
    for name, server in servers.items():
        assert server["sessions_opened"] >= 1, name  # least connections: both take sessions
        # Each session's frames, counted by the server's own engine, and its WebSocket by HAProxy's.
        assert server["audio_s"] == round(server["sessions_opened"] * FRAMES * FRAME_S, 2)
        assert server["haproxy_websocket_upgrades"] == server["sessions_opened"]
        assert server["haproxy_failed_checks"] == 0 and server["haproxy_status"] == "UP"
    assert balance["balanced"]["sessions_by_server"] == [
        servers["gpu0"]["sessions_opened"],
        servers["gpu1"]["sessions_opened"],
    ]

    # Each server alone in turn: the per-GPU load (2 streams x 2 sessions) there, none on the other.
    solo = json.loads((out / "solo.json").read_text())
    assert sorted(solo) == ["gpu0", "gpu1"]
    for name, run in balance["solo"].items():
        other = "gpu1" if name == "gpu0" else "gpu0"
        assert run["servers"][name]["sessions_opened"] == 4
        assert run["servers"][name]["audio_s"] == round(4 * FRAMES * FRAME_S, 2)
        assert run["servers"][other]["sessions_opened"] == 0
        assert solo[name]["levels"][0]["streams"] == 2
    assert "summary: balanced: 4 x 2" in log
