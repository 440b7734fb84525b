"""What a `bench-engine --trace` run kept each thread and each GPU stream busy with: a summary of
torch.profiler's Chrome trace, small enough to keep with the report (the trace of a run at 256
streams is hundreds of megabytes, and a browser's trace viewer cannot open it whole).

A thread's or stream's busy time is the union of its events' intervals (nested ops count once);
its top names are those of its outermost events, by `family` and time. A GPU stream's gaps are
the idle spells between its consecutive kernels longer than `GAP_US`: on a stream fed by CUDA
graphs, those are where it waited for the host or for another stream's kernels holding the SMs."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
GAP_US = 20.0  # longer than a kernel launch's own spacing inside a graph (a few µs)
TOP = 8


def _outermost(events: list[dict[str, Any]]) -> tuple[float, list[tuple[str, float]]]:
    """Union of the events' intervals (µs) and the outermost events' (name, duration)."""
    busy = 0.0
    outer: list[tuple[str, float]] = []
    end = float("-inf")
    for event in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        start, stop = event["ts"], event["ts"] + event["dur"]
        if start >= end:  # not inside the last outermost event
            outer.append((event["name"], event["dur"]))
            busy += event["dur"]
            end = stop
        elif stop > end:  # overlaps it without nesting (several GPU streams merged): count the rest
            busy += stop - end
            end = stop
    return busy, outer


def family(name: str) -> str:
    """A kernel's or op's name without what varies between its instances: a template's arguments,
    a signature, Inductor's numbering, cuBLAS's tile shapes (`nvjet_...`)."""
    if name.startswith("nvjet_"):
        return "nvjet (cuBLAS GEMM)"
    name = re.split(r"[<(]", name, maxsplit=1)[0].strip()
    return re.sub(r"_\d+$", "", name) if name.startswith("triton_") else name


def _top(outer: list[tuple[str, float]]) -> list[dict[str, Any]]:
    time: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for name, dur in outer:
        kind = family(name)
        time[kind] += dur
        count[kind] += 1
    return [
        {"name": name, "count": count[name], "ms": round(us / 1000, 3)} for name, us in time.most_common(TOP)
    ]


def _gaps(events: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(events, key=lambda e: e["ts"])
    gaps = []
    end = ordered[0]["ts"] + ordered[0]["dur"]
    for event in ordered[1:]:
        if event["ts"] - end > GAP_US:
            gaps.append(event["ts"] - end)
        end = max(end, event["ts"] + event["dur"])
    gaps.sort()
    return {
        "count": len(gaps),
        "ms": round(sum(gaps) / 1000, 3),
        "p50_us": round(gaps[len(gaps) // 2], 1) if gaps else None,
        "max_us": round(gaps[-1], 1) if gaps else None,
    }


def summarize(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a Chrome trace's events (see the module's docstring)."""
    names: dict[tuple[Any, Any], str] = {}
    cpu: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    gpu: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            names[(event.get("pid"), event.get("tid"))] = str(event.get("args", {}).get("name", ""))
        elif event.get("ph") == "X" and "dur" in event:
            category = event.get("cat")
            if category in GPU_CATEGORIES:
                gpu[(event["pid"], event["tid"])].append(event)
            elif category in CPU_CATEGORIES:
                cpu[(event["pid"], event["tid"])].append(event)
    every = [e for group in (*cpu.values(), *gpu.values()) for e in group]
    if not every:
        raise ValueError("the trace has no CPU ops and no GPU kernels")
    start = min(e["ts"] for e in every)
    span = max(e["ts"] + e["dur"] for e in every) - start

    def share(us: float) -> float:
        return round(us / span, 4) if span else 0.0

    threads = []
    for key, group in cpu.items():
        busy, outer = _outermost(group)
        threads.append(
            {
                "thread": names.get(key) or str(key[1]),
                "ops": len(group),
                "busy_ms": round(busy / 1000, 3),
                "busy_share": share(busy),
                "top": _top(outer),
            }
        )
    streams = []
    for key, group in gpu.items():
        busy, outer = _outermost(group)
        streams.append(
            {
                "stream": names.get(key) or f"device {key[0]} stream {key[1]}",
                "events": len(group),
                "busy_ms": round(busy / 1000, 3),
                "busy_share": share(busy),
                "gaps": _gaps(group),
                "top": _top(outer),
            }
        )
    report: dict[str, Any] = {
        "span_ms": round(span / 1000, 3),
        "threads": sorted(threads, key=lambda t: -t["busy_ms"]),
    }
    if gpu:
        busy_any, _ = _outermost([e for group in gpu.values() for e in group])
        report["gpu"] = {
            "busy_ms": round(busy_any / 1000, 3),
            "busy_share": share(busy_any),
            "streams": sorted(streams, key=lambda s: -s["busy_ms"]),
        }
    return report


def summarize_file(path: Path) -> dict[str, Any]:
    """`summarize` of a Chrome trace file as torch.profiler writes it (gzipped if named .gz)."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        return summarize(json.load(f)["traceEvents"])
