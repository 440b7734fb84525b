"""How `voicewire serve` runs its processes: the profile `--config auto` picks, the worker app
factory, and `voicewire serve --workers N` end to end (sessions on a shared engine, a clean stop
that takes the engine along)."""

import asyncio
import contextlib
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.fresh_interpreter import run_fresh
from tests.server.conftest import _descendants
from tests.server.wsclient import WireClient
from voicewire.engine import EngineConfig
from voicewire.engine.runtime.engine_process import EngineProcess
from voicewire.engine.runtime.metrics import read_process_cpu, read_thread_cpu
from voicewire.server import serving
from voicewire.server.app import BackgroundServer
from voicewire.server.config import ServerConfig
from voicewire.server.serving import (
    CONFIGS,
    CRASH_LOOP_S,
    DEFAULT_MODEL,
    WORKER_APP,
    choose_profile,
    create_worker_app,
    worker_environment,
)


def test_auto_profile_serves_the_real_model_only_with_a_gpu_and_the_model_in_reach() -> None:
    profile, why = choose_profile(cuda=True, hub=True)
    assert profile == CONFIGS / "gpu.yaml" and profile.is_file() and DEFAULT_MODEL in why
    for cuda, reason in ((False, "no CUDA GPU"), (True, "neither cached nor reachable")):
        profile, why = choose_profile(cuda=cuda, hub=False)
        assert profile == CONFIGS / "cpu.yaml" and profile.is_file()
        assert reason in why and "tiny checkpoint" in why and "noise, not words" in why


def test_auto_profile_asks_for_cuda_without_importing_torch() -> None:
    # In a fresh interpreter: this one has imported torch for other tests. The CI machine has no
    # GPU, so it is the CPU profile here; wherever it runs, the answer is the child's.
    code = (
        "import sys\n"
        "from voicewire.server.serving import AUTO_PROFILE, cuda_available, resolve_auto_profile\n"
        "profile, cuda = resolve_auto_profile(AUTO_PROFILE), cuda_available()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(profile.name, cuda)\n"
    )
    name, cuda = run_fresh(code).split()
    import torch

    assert cuda == str(torch.cuda.is_available())
    assert name == "cpu.yaml" or cuda == "True"  # gpu.yaml needs a GPU (and the model in reach)


def test_the_cli_imports_no_prometheus_client_before_serve_names_its_metrics_folder() -> None:
    """prometheus-client picks its multiprocess mode when first imported (server/metrics_dir.py):
    the CLI, and this module with it, import it only once `serve` has set the folder."""
    probe = "import sys, voicewire.server.cli; print('prometheus_client' in sys.modules)"
    assert run_fresh(probe).strip() == "False"


def test_the_workers_import_string_names_their_app_factory() -> None:
    from uvicorn.importer import import_from_string

    assert import_from_string(WORKER_APP) is create_worker_app


async def _speak(url: str, text: str) -> tuple[str, int]:
    client = await WireClient.open(url)
    await client.start(voice={"speaker": "ryan"}, sampling={"greedy": True}, max_frames=6)
    await client.send({"type": "text", "context_id": "a", "text": text})
    await client.send({"type": "end", "context_id": "a"})
    done, messages = await client.until(lambda m: m["type"] in ("done", "error"))
    await client.close()
    reason = done["reason"] if done["type"] == "done" else f"error {done['code']}"
    return reason, sum(m["samples"] for m in messages if m["type"] == "audio")


def test_a_worker_app_joins_the_engine_of_its_environment(tiny_checkpoints, monkeypatch) -> None:
    # A worker app stops its process when it loses the engine. Here that process is pytest's: a
    # failure before the app stops would end the whole run, unreported, once the engine closes.
    monkeypatch.setattr(serving, "stop_this_process", lambda: None)
    config = ServerConfig(max_contexts=2)
    with EngineProcess.start(
        EngineConfig(model=str(tiny_checkpoints["custom_voice"]), max_streams=4)
    ) as engine:
        environment = worker_environment(engine, config)
        assert worker_environment(engine, config) != environment  # a fresh shared secret each time
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        try:
            app = create_worker_app()
            assert gc.get_freeze_count() > 0  # its start-up heap, out of the collector's walks
        finally:
            gc.unfreeze()  # the test process's, that is
        assert app.state.config == ServerConfig(max_contexts=2, token_secret=app.state.config.token_secret)
        assert len(app.state.config.token_secret) == 64
        runner = BackgroundServer(app)
        port = runner.start()
        try:
            reason, samples = asyncio.run(_speak(f"ws://127.0.0.1:{port}", "Hello there."))
        finally:
            runner.stop()
        assert reason == "max_frames" and samples == 6 * 1920 * 2  # 48 kHz Opus by default
        assert engine.healthy  # the worker's going did not stop the engine


def _serve(
    tiny_checkpoints, tmp_path: Path, workers: int, **server: object
) -> tuple[subprocess.Popen, int, list[int]]:
    """`voicewire serve --workers N` on a free port, ready; its process, port and child processes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    profile = tmp_path / "workers.yaml"
    profile.write_text(
        # 16 slots: /ready answers once one worker is warm, and another may still hold its 4
        # warm-up streams when the test's 6 sessions arrive.
        yaml.safe_dump(
            {"engine": {"max_streams": 16, "kv_length": 256}, "server": {"workers": workers, **server}}
        )
    )
    command = [
        sys.executable,
        "-m",
        "voicewire.server.cli",
        "serve",
        "--model",
        str(tiny_checkpoints["custom_voice"]),
    ]
    with open(tmp_path / "serve.log", "w") as log:
        process = subprocess.Popen(
            [*command, "--config", str(profile), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the server did not become ready: {(tmp_path / 'serve.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as response:
                # /ready answers from the first worker that is warm; until the others listen too,
                # the kernel hands every connection to the sockets that do.
                if response.status == 200 and _listening_sockets(port) >= workers:
                    break
                time.sleep(0.3)
        except OSError:
            time.sleep(0.3)
    children = _descendants(process.pid)
    assert len(children) >= workers + 1  # the workers and the engine process (and multiprocessing's helper)
    return process, port, children


def _listening_sockets(port: int) -> int:
    """How many TCP sockets listen on `port` (IPv4), from the kernel's table."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    local_and_state = [(fields[1], fields[3]) for fields in (line.split() for line in lines)]
    return sum(1 for local, state in local_and_state if local.endswith(f":{port:04X}") and state == "0A")


def _gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout  # multiprocessing's resource tracker leaves last, by a moment
    while [pid for pid in pids if os.path.exists(f"/proc/{pid}")] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")], "processes outlived the server"


def _exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def _scrape(port: int) -> dict[str, float]:
    """The unlabelled samples of the server's /metrics, by name."""
    return {
        name: float(value)
        for name, value in re.findall(r"^([a-z_]+) ([0-9.e+-]+)$", _exposition(port), flags=re.MULTILINE)
    }


def _opened_by_process(port: int) -> dict[str, float]:
    """voicewire_sessions_opened_total by its `process` label."""
    pattern = r'^voicewire_sessions_opened_total\{process="([0-9]+)"\} ([0-9.e+-]+)$'
    return {pid: float(n) for pid, n in re.findall(pattern, _exposition(port), flags=re.MULTILINE)}


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_with_workers(tiny_checkpoints, tmp_path: Path, workers: int) -> None:
    process, port, children = _serve(tiny_checkpoints, tmp_path, workers=workers)
    try:

        async def many():
            return await asyncio.gather(*(_speak(f"ws://127.0.0.1:{port}", "Hi.") for _ in range(6)))

        assert asyncio.run(many()) == [("max_frames", 6 * 1920 * 2)] * 6
        # Whichever worker answers, /metrics sums every process: both workers' sessions, and the
        # engine process's own metrics (the workers' warm-up streams count there too).
        for _ in range(4):
            metrics = _scrape(port)
            assert metrics["voicewire_first_audio_seconds_count"] == 6
            assert metrics["voicewire_realtime_factor_count"] == 6
            assert metrics["voicewire_engine_frames_total"] >= 6 * 6
            assert metrics["voicewire_engine_first_chunk_seconds_count"] >= 6
            # Each stream's first text timed on its way in, from the worker's push (the workers'
            # warm-up streams too), as each is timed on to its first frame.
            text_in = metrics["voicewire_engine_first_text_hop_seconds_count"]
            assert text_in == metrics["voicewire_engine_first_frame_seconds_count"] >= 6
            assert 0 < metrics["voicewire_engine_first_text_hop_seconds_sum"] < text_in * 1.0
            assert metrics["voicewire_engine_step_seconds_count"] >= 6
            # Each chunk's way from the engine process's decoder, whole and in hops that add up to it.
            delivered = metrics["voicewire_chunk_delivery_seconds_count"]
            assert delivered >= 6
            hops = ("engine_send", "pipe", "wait", "encode")
            assert [metrics[f"voicewire_chunk_{hop}_seconds_count"] for hop in hops] == [delivered] * 4
            assert sum(metrics[f"voicewire_chunk_{hop}_seconds_sum"] for hop in hops) == pytest.approx(
                metrics["voicewire_chunk_delivery_seconds_sum"], abs=1e-6
            )
            assert all(metrics[f"voicewire_chunk_{hop}_seconds_sum"] >= 0 for hop in hops)
            # Each chunk's packets are a codec job, each job timed three ways (server.codec_pool).
            jobs = metrics["voicewire_codec_run_seconds_count"]
            assert jobs >= delivered
            times = ("late", "stalled")
            assert [metrics[f"voicewire_codec_{name}_seconds_count"] for name in times] == [jobs] * 2
            # Each context's first chunk again, alone: one a context, its encoding part of it.
            assert metrics["voicewire_first_chunk_delivery_seconds_count"] == 6
            assert metrics["voicewire_first_chunk_encode_seconds_count"] == 6
            assert (
                0
                < metrics["voicewire_first_chunk_encode_seconds_sum"]
                < metrics["voicewire_first_chunk_delivery_seconds_sum"]
                <= metrics["voicewire_chunk_delivery_seconds_sum"]
            )
            # Each worker counts the sessions it took, under its own process id.
            opened = _opened_by_process(port)
            assert sum(opened.values()) == 6 and 1 <= len(opened) <= workers
            assert set(opened) <= {str(pid) for pid in children} | {str(process.pid)}
        # Each process's CPU time under its own pid and role: the engine process's and every
        # process that serves sockets (the workers, or `serve` itself with one).
        engine = str(_engine_pid(tmp_path))
        servers = _worker_pids(process, tmp_path) if workers > 1 else [process.pid]
        cpu = read_process_cpu(_exposition(port))
        assert set(cpu) == {("engine", engine)} | {("server", str(pid)) for pid in servers}
        assert all(seconds > 0.1 for seconds in cpu.values()), cpu  # loading, warm-up and 6 sessions
        # The same CPU by thread group: the groups of each process add up to its CPU time, and
        # each worked where it should: the workers' event loops, the engine's talker and decoder.
        # Both from one reading: each process samples its CPU and its groups together every 0.5 s, and
        # two readings apart let a busy engine process's CPU run 0.52 s past its groups' (CI, session 62).
        exposition = _exposition(port)
        threads, cpu = read_thread_cpu(exposition), read_process_cpu(exposition)
        by_process = {
            process: {group: s for (r, p, group), s in threads.items() if (r, p) == process}
            for process in cpu
        }
        for (role, pid), groups in by_process.items():
            assert sum(groups.values()) == pytest.approx(cpu[role, pid], abs=0.5), (role, groups, cpu)
            # Each group's share, not a floor of seconds: 6 sessions of 6 tiny frames take the
            # talker and the decoder tens of ms, and a worker's loop about 0.5 s, which floors of
            # 0.1, 0.05 and 0.5 s missed on a quick machine.
            if role == "server":
                assert groups["main"] == max(groups.values()) > 0 and "engine-reader" in groups, groups
            else:
                assert groups["talker"] > 0 and groups["decoder"] > 0, groups
        # 6 sessions of 6 frames are little Opus, and a worker may have taken none: its threads are there.
        assert any("codec" in groups for (role, _), groups in by_process.items() if role == "server")
        # PyTorch is the engine process's alone: neither `serve`, which spawned it (and with one
        # worker serves the sockets itself), nor a worker that served sessions loaded it.
        assert _loads_torch(int(engine))
        assert not any(_loads_torch(pid) for pid in {process.pid, *servers})
        # The gauges, summed over the workers, come back to 0 once every session has closed (a
        # worker may still be closing its last one when the clients are done).
        deadline = time.monotonic() + 20
        while (open_ := _scrape(port))["voicewire_sessions"] or open_["voicewire_contexts"]:
            assert time.monotonic() < deadline, open_
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _gone(children, 15)
    log = (tmp_path / "serve.log").read_text()
    assert f"with {workers} worker(s)" in log
    # The engine process and each process that serves sockets froze their start-up heaps.
    assert len(re.findall(r"froze \d+ start-up objects", log)) == 1 + workers


def _engine_pid(tmp_path: Path) -> int:
    """The engine process of the server `_serve` started, as its log names it."""
    return int(re.search(r"engine process (\d+) ready", (tmp_path / "serve.log").read_text()).group(1))


def _until_workers_joined(tmp_path: Path, workers: int) -> None:
    """Until each worker has joined the engine process, as it logs once it is greeted (`_serve`
    returns once one worker is ready and the others listen, which they do before they join)."""
    log = tmp_path / "serve.log"
    deadline = time.monotonic() + 60
    while len(re.findall(r"joined the engine process$", log.read_text(), re.MULTILINE)) < workers:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def _worker_pids(process: subprocess.Popen, tmp_path: Path) -> list[int]:
    """The server's worker processes: its spawned children other than the engine process."""
    engine = _engine_pid(tmp_path)
    children = [
        int(pid)
        for task in Path(f"/proc/{process.pid}/task").glob("*")
        for pid in (task / "children").read_text().split()
    ]
    return [pid for pid in children if pid != engine and b"spawn_main" in _cmdline(pid)]


def _loads_torch(pid: int) -> bool:
    """Whether a process has PyTorch's library mapped (it stays mapped once imported)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def _cmdline(pid: int) -> bytes:
    """A process's command line; empty once it is gone (a killed worker can leave the list of
    children between the listing and this read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def test_a_busy_worker_does_not_take_every_waiting_connection(tiny_checkpoints, tmp_path: Path) -> None:
    """Each worker listens on a socket of its own on the one port (SO_REUSEPORT), and the kernel
    spreads connections over the sockets. 40 connections arrive while both workers are stopped;
    one resumes a second before the other. On one shared socket it would accept all 40 (asyncio
    and uvloop accept until the queue is empty); here it takes only its own share: fewer than 8
    on either worker is a 1-in-40,000 event."""
    process, port, children = _serve(tiny_checkpoints, tmp_path, workers=2)
    workers = _worker_pids(process, tmp_path)
    assert len(workers) == 2
    try:
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)

        async def burst() -> None:
            opening = [asyncio.create_task(WireClient.open(f"ws://127.0.0.1:{port}")) for _ in range(40)]
            await asyncio.sleep(1.0)  # the kernel completes the TCP handshakes into the listen queues
            os.kill(workers[0], signal.SIGCONT)
            await asyncio.sleep(1.0)
            os.kill(workers[1], signal.SIGCONT)
            clients = await asyncio.gather(*opening)
            await asyncio.gather(*(client.close() for client in clients))

        asyncio.run(burst())
        deadline = time.monotonic() + 20
        while sum((opened := _opened_by_process(port)).values()) < 40:
            assert time.monotonic() < deadline, opened
            time.sleep(0.2)
        assert set(opened) == {str(pid) for pid in workers}, (opened, _listening_sockets(port))
        assert min(opened.values()) >= 8, opened
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
            process.wait()
    _gone(children, 15)


def test_a_crashed_worker_is_replaced(tiny_checkpoints, tmp_path: Path) -> None:
    process, port, children = _serve(tiny_checkpoints, tmp_path, workers=2)
    replacements: list[int] = []
    try:
        first = _worker_pids(process, tmp_path)
        time.sleep(CRASH_LOOP_S)  # past the start-up window, where a crash stops the server instead
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while len(now := _worker_pids(process, tmp_path)) != 2 or first[0] in now:
            assert time.monotonic() < deadline and process.poll() is None, now
            time.sleep(0.2)
        replacements += set(now) - set(first)
        url = f"ws://127.0.0.1:{port}"

        async def sessions() -> list[tuple[str, int]]:
            return await asyncio.gather(*(_speak(url, "Hi.") for _ in range(6)))

        assert asyncio.run(sessions()) == [("max_frames", 6 * 1920 * 2)] * 6
        assert f"server worker {first[0]} exited -9: starting another" in (tmp_path / "serve.log").read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _gone([*children, *replacements], 15)


def test_a_killed_server_leaves_no_process_behind(tiny_checkpoints, tmp_path: Path) -> None:
    """SIGKILL gives uvicorn no chance to stop its workers: the engine process sees its owner go,
    and the workers see the engine go, and each stops by itself."""
    process, port, children = _serve(tiny_checkpoints, tmp_path, workers=2)
    try:
        assert asyncio.run(_speak(f"ws://127.0.0.1:{port}", "Hi.")) == ("max_frames", 6 * 1920 * 2)
        process.kill()
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _gone(children, 30)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_server_whose_engine_dies_past_its_restarts_stops(
    tiny_checkpoints, tmp_path: Path, workers: int
) -> None:
    """engine_restarts: 0: nothing is left listening that can only fail; a supervisor sees the exit."""
    process, _, children = _serve(tiny_checkpoints, tmp_path, workers=workers, engine_restarts=0)
    try:
        if workers > 1:  # (one worker is the server process itself, which started the engine)
            _until_workers_joined(tmp_path, workers)  # else one may be reading its greeting as it dies
        engine = _engine_pid(tmp_path)
        assert engine in children
        os.kill(engine, signal.SIGKILL)
        assert process.wait(timeout=60) != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _gone(children, 30)
    log = (tmp_path / "serve.log").read_text()
    assert "the engine process died 1 times in 300 s" in log and "giving up" in log
    assert "the engine process is gone: stopping server process" in log


def test_a_server_whose_engine_dies_heals(tiny_checkpoints, tmp_path: Path) -> None:
    """The engine process is started again on the same socket: /ready answers 503 until the new
    one is warm, then 200, and every worker serves new sessions on it."""
    process, port, _ = _serve(tiny_checkpoints, tmp_path, workers=2)
    try:
        _until_workers_joined(tmp_path, 2)  # else one may be reading its greeting as the engine dies
        first = _engine_pid(tmp_path)
        os.kill(first, signal.SIGKILL)
        statuses = set()
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, statuses
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as response:
                    statuses.add(response.status)
                    if response.status == 200 and 503 in statuses:
                        break
            except urllib.error.HTTPError as error:
                statuses.add(error.code)
            except OSError:
                pass
            time.sleep(0.1)
        log = (tmp_path / "serve.log").read_text()
        assert "the engine process exited (code -9): starting another" in log
        assert "joined the engine process again" in log
        # Six sessions: the kernel spreads them over both workers' sockets.
        results = [asyncio.run(_speak(f"ws://127.0.0.1:{port}", "Hi.")) for _ in range(6)]
        assert results == [("max_frames", 6 * 1920 * 2)] * 6
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_must_be_positive(workers: int) -> None:
    with pytest.raises(ValueError, match="workers must be > 0"):
        ServerConfig(workers=workers)


def test_workers_share_the_cpus_among_their_codec_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert ServerConfig().codec_thread_count == 16
    assert ServerConfig(workers=4).codec_thread_count == 4
    assert ServerConfig(workers=32).codec_thread_count == 1
    assert ServerConfig(workers=4, codec_threads=6).codec_thread_count == 6
    with pytest.raises(ValueError, match="codec_threads must be > 0"):
        ServerConfig(codec_threads=0)
