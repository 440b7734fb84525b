"""`voicewire bench` through HAProxy in front of one `voicewire serve` per GPU, and the balance.

    python3 scripts/lb_bench.py configs/gpu.yaml 2 OUT --size 0.6b     # a lent two-GPU host
    .venv/bin/python scripts/lb_bench.py configs/cpu.yaml 2 /tmp/lb --streams 4 --frames 12 --sessions 2

One command for a host that cannot download (docs/deployment.md, "Measuring it"):
1. HAProxy: the .deb files in --debs (Debian's haproxy and the libraries it links) are unpacked
   with `dpkg -x` into a private folder and run with LD_LIBRARY_PATH, not installed; with no
   --debs folder, the `haproxy` on PATH.
2. scripts/serve_gpus.sh starts one server per GPU (port --base-port + i; the profile, with any
   --set values changed) and HAProxy in front (--lb-port). Each server's /ready is polled until
   every one is warm (until --ready-by), then HAProxy's statistics until it has every server up.
3. A short warm-up through the balancer; then the bench through it: --streams busy streams (all
   text at once, no cancels), --sessions sessions each; then, unless --no-solo, the same load per
   GPU against each server alone in turn while the others idle: the one-GPU baseline of this host
   is their mean.
4. Into OUT, at most 8 files (what the device tool brings back): bench.json and bench.md (through
   the balancer), solo.json (each server's bench alone, by name: gpu0, gpu1, ...), balance.json
   (per server, over each bench: sessions opened by its own count and audio seconds its engine
   made; WebSocket upgrades, connections, open sessions sampled every 0.5 s and failed health
   checks by HAProxy's; CPU cores its processes used), metrics.txt (every server's /metrics after
   the balanced bench), serve.log, haproxy.log and lb_bench.log (this script's log: the tables,
   the balance, the generated HAProxy config).

A bench's own server-side figures (`engine`, `server`, `server_cpu_cores`) come from /metrics at
its URL: through the balancer, the first server's alone (configs/haproxy.cfg sends /metrics there).
Benches end by --deadline (seconds from the start); what was measured by then is written anyway.
Uses the standard library only (PyYAML for --set): `voicewire` runs as `python -m voicewire.server.cli`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START = time.monotonic()
BACKEND = "voicewire"  # configs/haproxy.cfg's backend
LOG_BYTES = 4_000_000  # the tail of each log kept in OUT
# Audio a frame of codes makes: the codec's 12.5 frames a second (the engine's SAMPLES_PER_FRAME /
# SAMPLE_RATE; this script keeps to the standard library).
FRAME_S = 0.08
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Run:
    """This run's settings, its log and its work folder."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="voicewire-lb-"))
        self.log_file = (self.out / "lb_bench.log").open("a")
        self.ports = [args.base_port + i for i in range(args.gpus)]
        self.stats = f"http://127.0.0.1:{args.stats_port}/stats;csv"

    def log(self, message: str) -> None:
        line = f"[{time.monotonic() - START:6.1f}s] {message}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left_s(self) -> float:
        return self.args.deadline - (time.monotonic() - START)


def http_get(url: str, timeout: float = 10) -> tuple[int, str]:
    """Status and body of a GET; 0 and the reason when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


# -- HAProxy from .deb files ------------------------------------------------------------------


def haproxy_command(run: Run) -> str:
    """A haproxy command that runs here: the unpacked .debs behind a wrapper setting
    LD_LIBRARY_PATH (for haproxy alone: the servers keep the host's libraries), else PATH's."""
    debs = sorted(run.args.debs.glob("*.deb")) if run.args.debs.is_dir() else []
    if not debs:
        found = shutil.which("haproxy")
        if found is None:
            raise SystemExit(f"no .deb files in {run.args.debs} and no haproxy on PATH")
        return found
    root = run.work / "haproxy-root"
    for deb in debs:
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    libs = [root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu"]
    wrapper = run.work / "haproxy"
    # First Debian's whole set (as tested); on a host whose C library is older than bookworm's,
    # only the libraries the host lacks, beside its own.
    for attempt in (lambda: libs, lambda: [_missing_libs(libs, run.work / "haproxy-libs")]):
        path = ":".join(str(p) for p in attempt())
        wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={path} exec {root}/usr/sbin/haproxy "$@"\n')
        wrapper.chmod(0o755)
        check = subprocess.run([str(wrapper), "-v"], capture_output=True, text=True)
        if check.returncode == 0:
            run.log(
                f"haproxy from {len(debs)} .debs: {check.stdout.splitlines()[0]} (LD_LIBRARY_PATH={path})"
            )
            return str(wrapper)
        run.log(f"haproxy with LD_LIBRARY_PATH={path} failed: {check.stderr.strip()}")
    raise SystemExit("the unpacked haproxy does not run here")


def _missing_libs(libs: list[Path], folder: Path) -> Path:
    """A folder of links to the unpacked libraries whose names the host's loader cache lacks."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    known = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    folder.mkdir(exist_ok=True)
    for lib in libs:
        for so in lib.glob("*.so.*"):
            if f"{so.name} " not in known and not (folder / so.name).exists():
                (folder / so.name).symlink_to(so)
    return folder


# -- servers and balancer --------------------------------------------------------------------


def profile(run: Run) -> Path:
    """The servers' profile: --profile as it is, or a copy with the --set values in it."""
    if not run.args.set:
        return run.args.profile
    import yaml  # not the standard library's, but voicewire's own dependency

    data = yaml.safe_load(run.args.profile.read_text())
    for item in run.args.set:
        key, _, value = item.partition("=")
        *sections, name = key.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = yaml.safe_load(value)
    path = run.work / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run.log(f"profile: {run.args.profile} with {', '.join(run.args.set)}")
    return path


def start(run: Run, haproxy: str, model: str | None) -> subprocess.Popen[bytes]:
    """scripts/serve_gpus.sh: the servers and HAProxy, in a process group of their own."""
    serve_args = (["--model", model] if model else []) + shlex.split(run.args.serve_args)
    env = os.environ | {
        "LB_BIND": f"127.0.0.1:{run.args.lb_port}",
        "LB_STATS": f"127.0.0.1:{run.args.stats_port}",
        "HAPROXY": haproxy,
        "PYTHON": sys.executable,
        "LOG_DIR": str(run.work),
        "PIN_CPUS": "1" if run.args.pin_cpus else "0",
    }
    command = ["bash", str(ROOT / "scripts/serve_gpus.sh"), str(profile(run)), str(run.args.gpus)]
    command += [str(run.args.base_port), "--", *serve_args]
    run.log(f"start: {shlex.join(command)}")
    return subprocess.Popen(command, env=env, start_new_session=True)


def wait_ready(run: Run, serve: subprocess.Popen[bytes]) -> bool:
    """Polls each server's /ready until all answer 200, the deadline, or a server's exit."""
    ready: dict[int, float] = {}
    said = 0.0
    while len(ready) < len(run.ports):
        for port in run.ports:
            if port not in ready and http_get(f"http://127.0.0.1:{port}/ready", 5)[0] == 200:
                ready[port] = time.monotonic() - START
                run.log(f"127.0.0.1:{port} ready")
        if serve.poll() is not None:
            run.log(f"serve_gpus.sh exited ({serve.returncode}) before every server was ready")
            return False
        elapsed = time.monotonic() - START
        if len(ready) < len(run.ports) and elapsed > run.args.ready_by:
            run.log(f"not ready by {run.args.ready_by} s: {sorted(set(run.ports) - set(ready))}")
            return False
        if elapsed - said >= 30:
            states = {p: http_get(f"http://127.0.0.1:{p}/ready", 5) for p in run.ports if p not in ready}
            waiting = {p: s or b[:60] for p, (s, b) in states.items()}
            run.log(f"waiting: {waiting}")
            said = elapsed
        time.sleep(1)
    return True


def haproxy_servers(run: Run) -> dict[str, dict[str, str]]:
    """HAProxy's statistics row of each server of the backend, by server name."""
    status, body = http_get(run.stats, 5)
    if status != 200:
        return {}
    rows = csv.DictReader(io.StringIO(body.removeprefix("# ")))
    return {
        r["svname"]: r for r in rows if r["pxname"] == BACKEND and r["svname"] not in ("FRONTEND", "BACKEND")
    }


def wait_up(run: Run) -> bool:
    """Waits (30 s at most) until HAProxy's health checks have every server up."""
    for _ in range(60):
        servers = haproxy_servers(run)
        if len(servers) == len(run.ports) and all(r["status"] == "UP" for r in servers.values()):
            run.log(f"haproxy: all {len(servers)} servers UP")
            return True
        time.sleep(0.5)
    states = {n: r["status"] for n, r in haproxy_servers(run).items()}
    run.log(f"haproxy: not all servers up: {states}")
    return False


class OpenSampler:
    """HAProxy's open sessions on each server (`scur`), sampled every half second during a bench."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.samples: dict[str, list[int]] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> OpenSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        while not self.done.wait(0.5):
            for name, row in haproxy_servers(self.run).items():
                self.samples.setdefault(name, []).append(int(row["scur"] or 0))

    def report(self) -> dict[str, dict[str, int]]:
        """Per server, the median and the most of its open sessions over the samples."""
        return {n: {"p50": sorted(v)[len(v) // 2], "max": max(v)} for n, v in self.samples.items() if v}


def stop(run: Run, serve: subprocess.Popen[bytes]) -> None:
    """SIGTERM to serve_gpus.sh (it stops its servers and HAProxy), then SIGKILL to what is left."""
    if serve.poll() is None:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            run.log("serve_gpus.sh did not stop within 20 s")
    try:
        os.killpg(serve.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- measuring -------------------------------------------------------------------------------


def samples(exposition: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The (labels, value) of each sample of one metric in a Prometheus text exposition."""
    found = []
    for line in exposition.splitlines():
        match = SAMPLE.match(line)
        if match and match[1] == name:
            found.append((dict(LABEL.findall(match[2] or "")), float(match[3])))
    return found


def snapshot(run: Run) -> dict[str, Any]:
    """Each server's own counts (from its /metrics, every process summed) and HAProxy's."""
    servers = {}
    for i, port in enumerate(run.ports):
        _, text = http_get(f"http://127.0.0.1:{port}/metrics")
        cpu: dict[str, float] = {}
        for labels, value in samples(text, "voicewire_process_cpu_seconds"):
            cpu[labels.get("role", "?")] = cpu.get(labels.get("role", "?"), 0.0) + value
        opened = samples(text, "voicewire_sessions_opened_total")
        frames = samples(text, "voicewire_engine_frames_total")
        servers[f"gpu{i}"] = {
            "sessions_opened": sum(v for _, v in opened),
            "frames": sum(v for _, v in frames),
            "cpu_s": cpu,
        }
    keep = ("status", "scur", "smax", "stot", "hrsp_1xx", "hrsp_5xx", "econ", "eresp", "wretr", "wredis")
    haproxy = {
        n: {k: r.get(k, "") for k in (*keep, "chkfail", "chkdown")} for n, r in haproxy_servers(run).items()
    }
    return {"t": time.time(), "servers": servers, "haproxy": haproxy}


def balance(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per server, what happened between two snapshots; and how evenly the sessions spread."""

    def number(text: str) -> int:
        return int(text) if text.isdigit() else 0

    wall = after["t"] - before["t"]
    per_server = {}
    for name, now in after["servers"].items():
        then = before["servers"].get(name, {"sessions_opened": 0, "frames": 0, "cpu_s": {}})
        lb_now, lb_then = after["haproxy"].get(name, {}), before["haproxy"].get(name, {})

        def delta(key: str, lb_now: dict = lb_now, lb_then: dict = lb_then) -> int:
            return number(lb_now.get(key, "")) - number(lb_then.get(key, ""))

        per_server[name] = {
            "sessions_opened": round(now["sessions_opened"] - then["sessions_opened"]),
            # Its engine's frames between the snapshots: each GPU's share of the bench's audio
            # (the interval also holds the bench's start-up, so no rate is taken over it).
            "audio_s": round((now["frames"] - then["frames"]) * FRAME_S, 2),
            "haproxy_websocket_upgrades": delta("hrsp_1xx"),
            "haproxy_connections": delta("stot"),
            "haproxy_most_open_at_once": number(lb_now.get("smax", "")),  # since HAProxy started
            "haproxy_failed_checks": delta("chkfail"),
            "haproxy_marked_down": delta("chkdown"),
            "haproxy_status": lb_now.get("status"),
            "cpu_cores": {
                role: round((s - then["cpu_s"].get(role, 0.0)) / wall, 2) for role, s in now["cpu_s"].items()
            },
        }
    opened = [s["sessions_opened"] for s in per_server.values()]
    return {
        "wall_s": round(wall, 1),
        "sessions_by_server": opened,
        "max_over_min": round(max(opened) / min(opened), 3) if opened and min(opened) > 0 else None,
        "servers": per_server,
    }


def bench(run: Run, url: str, streams: int, name: str, frames: int, sessions: int) -> dict | None:
    """One `voicewire bench` level, cut at the deadline; its report, or None."""
    a = run.args
    report, table = run.work / f"{name}.json", run.work / f"{name}.md"
    command = [sys.executable, "-m", "voicewire.server.cli", "bench", "--url", url, "--streams", str(streams)]
    command += [
        "--frames",
        str(frames),
        "--sessions-per-stream",
        str(sessions),
        "--text-rate",
        str(a.text_rate),
    ]
    command += ["--cancel-every", str(a.cancel_every), "--out", str(report), "--markdown", str(table)]
    command += shlex.split(a.bench_args)
    left = run.left_s()
    if left < 10:
        run.log(f"{name}: skipped, {left:.0f} s left")
        return None
    run.log(f"{name}: {shlex.join(command[1:])}")
    with (run.work / f"{name}.err").open("w") as err:
        bench = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            code = bench.wait(left)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
            run.log(f"{name}: stopped at the deadline")
            return None
    if code != 0 or not report.exists():
        run.log(f"{name}: exit {code}\n{_tail(run.work / f'{name}.err', 3000)}")
        return None
    run.log(f"{name}:\n{table.read_text().strip()}")
    return json.loads(report.read_text())


def _tail(path: Path, size: int) -> str:
    data = path.read_bytes() if path.exists() else b""
    return data[-size:].decode(errors="replace")


def summary(run: Run, lb: dict | None, solo: dict[str, dict], spread: dict | None) -> None:
    """The headline: aggregate audio-s/s through the balancer, against one GPU alone (the mean of
    each GPU's run alone)."""

    def figures(level: dict) -> str:
        under = level["underruns"]
        return (
            f"{level['aggregate_audio_s_per_s']} audio-s/s, first audio p50/p95 "
            f"{level['first_audio_ms']['p50']}/{level['first_audio_ms']['p95']} ms, "
            f"{under['streams_with_underruns']} sessions gapped ({under['total_gap_s']} s)"
        )

    line = []
    runs = [("balanced", lb)] if lb else []
    for name, report in [*runs, *((f"{name} alone", report) for name, report in solo.items())]:
        level = report["levels"][0]
        line.append(f"{name}: {level['streams']} x {level['sessions_per_stream']}, {figures(level)}")
    if lb and solo:
        one = sum(r["levels"][0]["aggregate_audio_s_per_s"] for r in solo.values()) / len(solo)
        ratio = lb["levels"][0]["aggregate_audio_s_per_s"] / one
        line.append(f"{ratio:.2f}x one GPU (the mean of {len(solo)} alone, {one:.1f})")
    if spread:
        line.append(f"sessions by server {spread['sessions_by_server']}")
        made = [server["audio_s"] for server in spread["servers"].values()]
        if lb and sum(made) > 0:
            rate = lb["levels"][0]["aggregate_audio_s_per_s"] / sum(made)
            line.append(f"audio-s/s by server (its share of the frames) {[round(m * rate, 1) for m in made]}")
    run.log("summary: " + "; ".join(line))


def measure(run: Run) -> int:
    a = run.args
    for command in (["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], ["nproc"]):
        if shutil.which(command[0]):
            text = subprocess.run(command, capture_output=True, text=True).stdout.strip()
            run.log(f"{command[0]}: {text.replace(chr(10), ', ')}")
    haproxy = haproxy_command(run)
    model = a.model
    if model is None and a.size:  # seeded: the same weights as `voicewire bench --size` serves
        folder = run.work / f"random-{a.size}"
        make = [sys.executable, "-m", "voicewire.server.cli", "make-checkpoint", str(folder)]
        subprocess.run([*make, "--variant", "custom_voice", "--size", a.size], check=True)
        model = str(folder)
        run.log(f"random checkpoint: {model}")
    serve = start(run, haproxy, model)
    lb = spread = None
    solo: dict[str, dict] = {}
    try:
        if not (wait_ready(run, serve) and wait_up(run)):
            return 1
        url = f"ws://127.0.0.1:{a.lb_port}"
        if a.warmup_frames:
            bench(run, url, 2 * a.gpus, "warmup", a.warmup_frames, 1)
        streams = a.streams or 256 * a.gpus
        before = snapshot(run)
        with OpenSampler(run) as sampler:
            lb = bench(run, url, streams, "bench", a.frames, a.sessions)
        after = snapshot(run)
        spread = balance(before, after) | {"haproxy_open_sessions_sampled": sampler.report()}
        with (run.out / "metrics.txt").open("w") as metrics:
            for i, port in enumerate(run.ports):
                metrics.write(f"# ---- gpu{i}: http://127.0.0.1:{port}/metrics\n")
                metrics.write(http_get(f"http://127.0.0.1:{port}/metrics")[1])
        report: dict[str, Any] = {"balanced": spread}
        if a.solo:
            # Each GPU alone in turn, not the first only: one slow GPU, or a half of the host that
            # is busier, would otherwise set the baseline every ratio is taken against.
            report["solo"], mark = {}, after
            for i, port in enumerate(run.ports):
                alone = bench(
                    run, f"ws://127.0.0.1:{port}", streams // a.gpus, f"solo{i}", a.frames, a.sessions
                )
                if alone:
                    solo[f"gpu{i}"] = alone
                now = snapshot(run)  # this run's end, and the next one's start
                report["solo"][f"gpu{i}"] = balance(mark, now)
                mark = now
            if solo:
                (run.work / "solo.json").write_text(json.dumps(solo, indent=2) + "\n")
        report["haproxy_after"] = haproxy_servers(run)
        (run.out / "balance.json").write_text(json.dumps(report, indent=2) + "\n")
        run.log(f"balance through HAProxy: {json.dumps(spread)}")
        for name in ("bench.json", "bench.md", "solo.json"):
            if (run.work / name).exists():
                shutil.copy(run.work / name, run.out / name)
        summary(run, lb, solo, spread)
        return 0 if lb else 1
    finally:
        stop(run, serve)
        cfg = run.work / "haproxy.cfg"
        run.log(f"generated {cfg}:\n{cfg.read_text() if cfg.exists() else '(none)'}")
        with (run.out / "serve.log").open("w") as logs:
            for log in sorted(run.work.glob("serve_gpu*.log")):
                logs.write(f"==== {log.name} (last {LOG_BYTES} bytes)\n{_tail(log, LOG_BYTES)}\n")
        (run.out / "haproxy.log").write_text(_tail(run.work / "haproxy.log", LOG_BYTES))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "profile", type=Path, help="the servers' profile (configs/gpu.yaml, configs/cpu.yaml)"
    )
    parser.add_argument("gpus", type=int, help="servers, one per GPU (CUDA_VISIBLE_DEVICES=i)")
    parser.add_argument("out", type=Path, help="folder for the reports and logs")
    parser.add_argument("--size", help="serve a random checkpoint of this size (0.6b, 1.7b)")
    parser.add_argument("--model", help="serve this checkpoint (default: the profile's, or --size)")
    parser.add_argument("--streams", type=int, help="busy streams through the balancer (256 a GPU)")
    parser.add_argument("--sessions", type=int, default=5, help="sessions each stream runs back to back")
    parser.add_argument("--frames", type=int, default=100, help="forced frames a session (80 ms each)")
    parser.add_argument("--text-rate", type=float, default=0, help="words/s a stream; 0: all at once")
    parser.add_argument("--cancel-every", type=int, default=0, help="cancel every Nth session (0: none)")
    parser.add_argument(
        "--warmup-frames", type=int, default=20, help="a first bench, 2 streams a GPU (0: none)"
    )
    parser.add_argument(
        "--solo", action=argparse.BooleanOptionalAction, default=True, help="each GPU alone after"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a profile setting to change, e.g. server.codec_threads=3 (repeatable)",
    )
    parser.add_argument("--bench-args", default="", help="more `voicewire bench` arguments")
    parser.add_argument("--serve-args", default="", help="more `voicewire serve` arguments")
    parser.add_argument(
        "--pin-cpus",
        action="store_true",
        help="each server on its own slice of the CPUs (serve_gpus.sh PIN_CPUS)",
    )
    parser.add_argument("--base-port", type=int, default=8000)
    parser.add_argument("--lb-port", type=int, default=8080)
    parser.add_argument("--stats-port", type=int, default=8404)
    parser.add_argument("--debs", type=Path, default=ROOT / ".debs", help="haproxy's .deb files")
    parser.add_argument("--ready-by", type=float, default=480, help="seconds from the start")
    parser.add_argument("--deadline", type=float, default=560, help="seconds from the start")
    run = Run(parser.parse_args())
    try:
        return measure(run)
    finally:
        shutil.rmtree(run.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
