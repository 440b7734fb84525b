"""Which CPUs each GPU's server runs on, for `scripts/serve_gpus.sh` with PIN_CPUS=1.

    python3 server/gpu_cpus.py GPUS     # one line per GPU: its CPU list, for `taskset -c`

A server's engine process waits on its GPU, and its workers encode Opus on every CPU they get:
two servers on one host are CPU-bound together. Each server gets whole physical cores, on its
GPU's NUMA node where the host says which that is:
- **Whole cores.** Slicing the CPU numbers in order splits every core between the two servers on
  hosts that number a core's hyperthreads N and N + (CPUs / 2): each server's threads would then
  share every core with the other's.
- **Near the GPU.** A GPU's host copies (its audio, each step's tokens) go through memory on its
  own node. GPUs of one node share that node's cores. Cores of a node with no GPU are shared out
  as well, since an idle socket costs a CPU-bound server more than remote memory does.
Where the host does not tell (no `nvidia-smi`, no sysfs), the CPUs are split in order.

Only the standard library: the script runs it by path, whatever Python serves.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topology:
    """What the planning reads from the host."""

    allowed: frozenset[int]  # the CPUs this process may use (a container's, a cgroup's)
    cores: tuple[frozenset[int], ...]  # the hyperthreads of each physical core
    gpu_cpus: tuple[frozenset[int], ...]  # each GPU's node's CPUs; empty where unknown


def parse_cpu_list(text: str) -> frozenset[int]:
    """The kernel's CPU list format ("0-3,8,10-11")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Sequence[int]) -> str:
    """The inverse of parse_cpu_list: runs of consecutive CPUs as ranges."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def plan(topology: Topology, gpus: int) -> list[list[int]]:
    """The CPUs of each of `gpus` servers: whole cores, each GPU's from its own node first."""
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, not {gpus}")
    if not topology.allowed:
        raise ValueError("no CPUs to share out")
    cores = _allowed_cores(topology)
    local = [
        (topology.gpu_cpus[i] if i < len(topology.gpu_cpus) else frozenset()) & topology.allowed
        for i in range(gpus)
    ]
    if not all(local) or _overlap_apart(local):
        # Unknown or inconsistent nodes: one group of every GPU over every core.
        local = [topology.allowed] * gpus
    groups: dict[frozenset[int], list[int]] = {}
    for gpu, cpus in enumerate(local):
        groups.setdefault(cpus, []).append(gpu)
    node_cores = {cpus: [core for core in cores if min(core) in cpus] for cpus in groups}
    placed = {min(core) for listed in node_cores.values() for core in listed}
    spare = [core for core in cores if min(core) not in placed]
    slices: list[list[int]] = [[] for _ in range(gpus)]
    for cpus, members in groups.items():
        for gpu, share in zip(members, _split(node_cores[cpus], len(members)), strict=True):
            slices[gpu] = [cpu for core in share for cpu in sorted(core)]
    for gpu, share in enumerate(_split(spare, gpus)):
        slices[gpu].extend(cpu for core in share for cpu in sorted(core))
    if not all(slices) and topology.gpu_cpus:
        # A node whose CPUs name no core of their own (sysfs disagreeing with itself): as unknown.
        return plan(Topology(topology.allowed, topology.cores, ()), gpus)
    return [sorted(s) for s in slices]


def _allowed_cores(topology: Topology) -> list[frozenset[int]]:
    """The allowed CPUs grouped by physical core, in order of each core's first CPU; a CPU the
    core list does not name is a core of its own."""
    cores: dict[int, frozenset[int]] = {}
    named: set[int] = set()
    for core in topology.cores:
        mine = core & topology.allowed
        if mine:
            cores[min(mine)] = mine
            named |= mine
    for cpu in topology.allowed - named:
        cores[cpu] = frozenset({cpu})
    return [cores[first] for first in sorted(cores)]


def _overlap_apart(local: list[frozenset[int]]) -> bool:
    """Whether two GPUs' node CPU sets overlap without being the same node."""
    distinct = list(set(local))
    return any(a & b for i, a in enumerate(distinct) for b in distinct[i + 1 :])


def _split(cores: list[frozenset[int]], parts: int) -> list[list[frozenset[int]]]:
    """`cores` in `parts` runs of consecutive cores, as even as whole cores allow. Fewer cores than
    parts: each part gets one, shared."""
    if not cores:
        return [[] for _ in range(parts)]
    if len(cores) < parts:
        return [[cores[i % len(cores)]] for i in range(parts)]
    return [cores[i * len(cores) // parts : (i + 1) * len(cores) // parts] for i in range(parts)]


def read_topology(gpus: int, sys_root: Path = Path("/sys"), bus_ids: Sequence[str] | None = None) -> Topology:
    """This host's: the process's affinity, sysfs's cores and each GPU's node CPUs (its PCI
    device's `local_cpulist`, the GPU found by `nvidia-smi`'s bus id, or `bus_ids`)."""
    allowed = frozenset(os.sched_getaffinity(0))
    cores: set[frozenset[int]] = set()
    for cpu in allowed:
        siblings = sys_root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            cores.add(parse_cpu_list(siblings.read_text()))
        except (OSError, ValueError):
            cores.add(frozenset({cpu}))
    ids = list(bus_ids) if bus_ids is not None else _nvidia_bus_ids()
    gpu_cpus: list[frozenset[int]] = []
    for bus_id in ids[:gpus]:
        try:
            gpu_cpus.append(
                parse_cpu_list((sys_root / "bus/pci/devices" / bus_id / "local_cpulist").read_text())
            )
        except (OSError, ValueError):
            gpu_cpus.append(frozenset())
    return Topology(allowed, tuple(sorted(cores, key=min)), tuple(gpu_cpus))


def _nvidia_bus_ids() -> list[str]:
    """Each GPU's PCI address as sysfs names it, in nvidia-smi's order (PCI bus order, which
    serve_gpus.sh gives CUDA too); none without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        logger.warning("nvidia-smi did not list the GPUs' PCI addresses; splitting the CPUs in order")
        return []
    return [sysfs_bus_id(line) for line in out.splitlines() if line.strip()]


def sysfs_bus_id(nvidia_id: str) -> str:
    """nvidia-smi's PCI address ("00000000:18:00.0", an 8-digit domain) as sysfs names the device
    ("0000:18:00.0")."""
    domain, _, rest = nvidia_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: gpu_cpus.py GPUS  (one line per GPU: its CPUs, for taskset -c)", file=sys.stderr)
        return 2
    gpus = int(argv[0])
    for cpus in plan(read_topology(gpus), gpus):
        print(format_cpu_list(cpus))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="gpu_cpus: %(message)s")
    sys.exit(main(sys.argv[1:]))
