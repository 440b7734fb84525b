"""server/gpu_cpus.py: each GPU's server gets whole cores on its GPU's node."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serve import free_ports
from voicewire.server import gpu_cpus
from voicewire.server.gpu_cpus import Topology, format_cpu_list, parse_cpu_list, plan

SCRIPT = Path(gpu_cpus.__file__)


def cores_split_at_half(cpus: int) -> tuple[frozenset[int], ...]:
    """A host whose core k has hyperthreads k and k + cpus / 2 (common on x86 servers)."""
    half = cpus // 2
    return tuple(frozenset({k, k + half}) for k in range(half))


def test_cpu_lists_read_and_written_as_the_kernel_does() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpu_list("") == frozenset()
    assert format_cpu_list([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpu_list([5]) == "5"


def test_hyperthreads_of_a_core_stay_with_one_server() -> None:
    # Slicing 0-31 in order would give server 0 CPUs 0-15: one hyperthread of every core.
    host = Topology(frozenset(range(32)), cores_split_at_half(32), ())
    assert plan(host, 2) == [[*range(0, 8), *range(16, 24)], [*range(8, 16), *range(24, 32)]]


def test_each_gpu_gets_its_own_node_whatever_the_order() -> None:
    node0, node1 = frozenset(range(0, 8)), frozenset(range(8, 16))
    host = Topology(frozenset(range(16)), tuple(frozenset({c}) for c in range(16)), (node1, node0))
    assert plan(host, 2) == [list(range(8, 16)), list(range(0, 8))]


def test_gpus_of_one_node_split_it_and_share_the_other_node() -> None:
    node0 = frozenset(range(0, 8))
    host = Topology(frozenset(range(16)), tuple(frozenset({c}) for c in range(16)), (node0, node0))
    # Node 0 split in whole halves; node 1 (no GPU) shared out as well, not left idle.
    assert plan(host, 2) == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]


def test_only_the_allowed_cpus_are_given() -> None:
    # A container allowed 8 CPUs of a 16-CPU host whose core k has hyperthreads k and k + 8.
    whole = Topology(frozenset({0, 1, 2, 3, 8, 9, 10, 11}), cores_split_at_half(16), ())
    assert plan(whole, 2) == [[0, 1, 8, 9], [2, 3, 10, 11]]
    # One hyperthread of each of 8 cores: each allowed CPU is a core of its own.
    halves = Topology(frozenset(range(4, 12)), cores_split_at_half(16), ())
    assert plan(halves, 2) == [[4, 5, 6, 7], [8, 9, 10, 11]]


def test_unknown_nodes_fall_back_to_splitting_in_order() -> None:
    host = Topology(frozenset(range(6)), (), (frozenset(), frozenset()))
    assert plan(host, 2) == [[0, 1, 2], [3, 4, 5]]
    assert plan(host, 4) == [[0], [1, 2], [3], [4, 5]]


def test_a_node_whose_cpus_are_no_core_of_their_own_counts_as_unknown() -> None:
    # sysfs puts CPUs 2 and 3 in one core with 0 and 1, yet names 2-3 as GPU 1's node.
    host = Topology(frozenset(range(4)), (frozenset(range(4)),), (frozenset({0, 1}), frozenset({2, 3})))
    assert plan(host, 2) == [[0, 1, 2, 3], [0, 1, 2, 3]]


def test_more_gpus_than_cores_share_cores() -> None:
    host = Topology(frozenset({0, 1}), (frozenset({0, 1}),), ())
    assert plan(host, 3) == [[0, 1], [0, 1], [0, 1]]


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan(Topology(frozenset({0}), (), ()), 0)


def test_read_topology_from_sysfs_and_nvidia_bus_ids(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    half = (max(allowed) + 2) // 2
    for cpu in allowed:
        folder = tmp_path / f"devices/system/cpu/cpu{cpu}/topology"
        folder.mkdir(parents=True)
        sibling = cpu + half if cpu < half else cpu - half
        folder.joinpath("thread_siblings_list").write_text(f"{min(cpu, sibling)},{max(cpu, sibling)}\n")
    device = tmp_path / "bus/pci/devices/0000:18:00.0"
    device.mkdir(parents=True)
    device.joinpath("local_cpulist").write_text(format_cpu_list(allowed) + "\n")
    bus = gpu_cpus.sysfs_bus_id("00000000:18:00.0\n")
    assert bus == "0000:18:00.0"
    # The second GPU's device is missing: its node is unknown.
    host = gpu_cpus.read_topology(2, tmp_path, [bus, "0000:3b:00.0"])
    assert host.allowed == frozenset(allowed)
    assert host.gpu_cpus == (frozenset(allowed), frozenset())
    assert all(len(core) == 2 and max(core) - min(core) == half for core in host.cores)


def test_the_script_prints_one_cpu_list_per_gpu() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "2"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    allowed = os.sched_getaffinity(0)
    assert all(lines) and all(parse_cpu_list(line) <= allowed for line in lines)
    bad = subprocess.run([sys.executable, str(SCRIPT), "none"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _server_pid(group: int, port: int) -> int:
    """The `voicewire serve --port PORT` process of a process group (its workers and engine
    process are its children, with the affinity it had when they started)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            if os.getpgid(int(entry.name)) == group and b"serve" in words and str(port).encode() in words:
                return int(entry.name)
        except (OSError, ProcessLookupError):
            continue
    raise AssertionError(f"no server on port {port} in process group {group}")


def test_serve_gpus_pins_each_server_to_its_plan_and_stops_all_when_one_exits(tmp_path: Path) -> None:
    base = free_ports(2)
    script = Path(__file__).resolve().parents[2] / "scripts" / "serve_gpus.sh"
    env = {**os.environ, "PIN_CPUS": "1", "PYTHON": sys.executable, "LOG_DIR": str(tmp_path)}
    with (tmp_path / "launcher.log").open("w") as log:  # the child keeps its own copy
        launcher = subprocess.Popen(
            ["bash", str(script), "configs/cpu.yaml", "2", str(base)],
            cwd=script.parents[1],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 240
        ready: set[int] = set()
        while len(ready) < 2:
            assert launcher.poll() is None, (tmp_path / "launcher.log").read_text()
            assert time.monotonic() < deadline, "the servers did not become ready"
            for port in {base, base + 1} - ready:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                        ready.add(port)
            time.sleep(0.3)
        planned = subprocess.run(
            [sys.executable, str(SCRIPT), "2"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        servers = [_server_pid(launcher.pid, port) for port in (base, base + 1)]
        for pid, cpus in zip(servers, planned, strict=True):
            assert os.sched_getaffinity(pid) == parse_cpu_list(cpus)
        assert f"GPU 1's server on CPUs {planned[1]}" in (tmp_path / "launcher.log").read_text()
        # One server gone: the script stops the other too, for a supervisor to restart the whole.
        os.kill(servers[0], signal.SIGKILL)
        assert launcher.wait(timeout=90) != 0
        assert not _listening(base + 1)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
