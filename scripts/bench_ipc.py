"""The engine process's side of its IPC, measured on CPU with the tiny checkpoint: one server
(this process) drives N busy streams through `EngineProcess` for a while, and this reports the
messages the engine process read from it, and the engine process's CPU time, per second of audio.

  engine   N streams, each session 100 forced frames with its text pushed word by word (at once,
           or at --words-per-second), sessions back to back until --seconds pass; figures from
           /proc/<engine pid>/stat, /proc/<engine pid>/io (read syscalls) and the schedstat of the
           engine's thread that reads this server's requests, and the messages written to it
  micro    the read path alone: a recorded mix of requests (per round, every stream acknowledges
           a chunk, a quarter of them push a word) read and unpickled one message per request
           against one message per round, in one process; requests handled per CPU second

For an A/B, run it from two copies of the tree (PYTHONPATH naming a folder whose `voicewire/`
links to each copy's engine, server and client); runs of each, alternated, on a busy machine.

Usage: python scripts/bench_ipc.py engine [--streams 16] [--seconds 20] [--words-per-second 0] [--out F]
       python scripts/bench_ipc.py micro [--streams 256] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import pickle
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TEXT = (
    "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun while "
    "the farmer counts his sheep and the river runs on to the sea."
)
TICK = os.sysconf("SC_CLK_TCK")


def _cpu(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _proc(pid: int, reader: int) -> tuple[float, int, float]:
    """(CPU seconds, read syscalls, CPU seconds of thread `reader`) of a process so far."""
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    thread = int(Path(f"/proc/{pid}/task/{reader}/schedstat").read_text().split()[0]) / 1e9  # ns on CPU
    return _cpu(Path(f"/proc/{pid}/stat")), int(io["syscr"]), thread


def _reader_thread(pid: int) -> int:
    """The engine process's thread reading this server's requests: while it is idle, the one thread
    besides the main one (which waits on its owner's pipe) blocked in read(2)."""
    time.sleep(1.0)
    readers = [
        int(task.name)
        for task in Path(f"/proc/{pid}/task").iterdir()
        if int(task.name) != pid and (task / "syscall").read_text().split()[0] == "0"
    ]
    assert len(readers) == 1, readers
    return readers[0]


def engine(streams: int, seconds: float, frames: int, words_per_s: float) -> dict:
    from voicewire.engine.config import EngineConfig, StreamOptions
    from voicewire.engine.model.random_checkpoint import make_checkpoint
    from voicewire.engine.runtime.engine_process import EngineProcess

    folder = make_checkpoint(Path(tempfile.mkdtemp(prefix="bench-ipc-")) / "cv", "custom_voice", "tiny", 1234)
    config = EngineConfig(model=str(folder), max_streams=streams, kv_length=512)
    options = StreamOptions(max_frames=frames, suppress_eos=True)
    with EngineProcess.start(config) as remote:
        assert remote.pid is not None
        conn = remote._conn  # both layouts write every request through this object's send_bytes
        written = [0]
        send_bytes = conn.send_bytes

        def counted(data: bytes, *args: int) -> None:
            written[0] += 1
            send_bytes(data, *args)

        conn.send_bytes = counted  # type: ignore[method-assign]

        async def feed(stream) -> None:
            for word in TEXT.split():
                stream.push_text(word + " ")
                if words_per_s:
                    await asyncio.sleep(1 / words_per_s)
            stream.end()

        async def session(voice) -> int:
            stream = remote.open_stream(voice, options)
            fed = asyncio.create_task(feed(stream))
            samples = sum([chunk.pcm.shape[0] async for chunk in stream])
            await fed
            return samples

        async def busy(voice, until: float) -> int:
            samples = 0
            while time.monotonic() < until:
                samples += await session(voice)
            return samples

        async def run() -> dict:
            voice = await remote.voice(speaker="serena")
            await asyncio.gather(*(session(voice) for _ in range(streams)))  # warm
            reader = _reader_thread(remote.pid)
            cpu0, reads0, read0 = _proc(remote.pid, reader)
            own0, written0, started = time.process_time(), written[0], time.monotonic()
            samples = sum(await asyncio.gather(*(busy(voice, started + seconds) for _ in range(streams))))
            wall = time.monotonic() - started
            cpu1, reads1, read1 = _proc(remote.pid, reader)
            audio = samples / 24_000
            return {
                "streams": streams,
                "words_per_s": words_per_s,
                "wall_s": round(wall, 2),
                "audio_s_per_s": round(audio / wall, 2),
                "messages_to_engine_per_s": round((written[0] - written0) / wall, 1),
                "messages_to_engine_per_audio_s": round((written[0] - written0) / audio, 2),
                "engine_read_syscalls_per_audio_s": round((reads1 - reads0) / audio, 2),
                "engine_cpu_ms_per_audio_s": round(1000 * (cpu1 - cpu0) / audio, 2),
                "engine_reader_thread_cpu_ms_per_audio_s": round(1000 * (read1 - read0) / audio, 3),
                "server_cpu_ms_per_audio_s": round(1000 * (time.process_time() - own0) / audio, 2),
            }

        return asyncio.run(run())


# --- micro: the read path alone -----------------------------------------------------------------


@dataclass(frozen=True)
class _Text:
    stream_id: int
    text: str


@dataclass(frozen=True)
class _Acknowledge:  # as requests were sent before batching
    stream_id: int
    consumed_samples: int


def micro(streams: int, rounds: int) -> dict:
    """Requests handled per CPU second of the reading thread, one message each against batches."""
    trace = [
        [(_Acknowledge(s, 1920 * r), _Text(s, "word ") if s % 4 == r % 4 else None) for s in range(streams)]
        for r in range(rounds)
    ]
    requests = sum(1 + (text is not None) for round_ in trace for _, text in round_)

    def read(conn, messages: int, handle, out: list[float]) -> None:
        started = time.thread_time()
        for _ in range(messages):
            handle(pickle.loads(conn.recv_bytes()))
        out.append(time.thread_time() - started)

    def one_each(request) -> None:
        pass

    def batch(message) -> None:
        for _ in message[0]:
            pass
        for _ in message[1].items():
            pass

    results = {}
    for layout in ("one message per request", "one message per round"):
        reader, writer = multiprocessing.Pipe(duplex=False)
        if layout == "one message per request":
            messages = [
                pickle.dumps(x, protocol=5)
                for round_ in trace
                for ack, text in round_
                for x in (ack, text)
                if x
            ]
            handle = one_each
        else:
            messages = [
                pickle.dumps(
                    ([t for _, t in round_ if t], {a.stream_id: a.consumed_samples for a, _ in round_}),
                    protocol=5,
                )
                for round_ in trace
            ]
            handle = batch
        out: list[float] = []
        thread = threading.Thread(target=read, args=(reader, len(messages), handle, out))
        thread.start()
        for message in messages:
            writer.send_bytes(message)
        thread.join()
        results[layout] = {"messages": len(messages), "requests_per_cpu_s": round(requests / out[0])}
    return {"streams": streams, "rounds": rounds, "requests": requests, **results}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["engine", "micro"])
    parser.add_argument("--streams", type=int)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--words-per-second", type=float, default=0.0, help="0: all the text at once")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.mode == "engine":
        report = engine(args.streams or 16, args.seconds, args.frames, args.words_per_second)
    else:
        report = micro(args.streams or 256, args.rounds)
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
