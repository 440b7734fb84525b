"""The engine in its own process, the servers' side (engine_process.py), beyond the contract both
engines share (test_contract.py): the same audio as in this process (the text tokenized in the
server), several servers on one engine, its key, a child that dies, and requests that cross in
batches."""

import asyncio
import collections
import concurrent.futures
import multiprocessing
import os
import pickle
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Listener

import numpy as np
import pytest

from tests.engine.runtime import orphan
from tests.engine.runtime.conftest import GREEDY, TEXT, fill_every_slot, until
from tests.engine.streaming import collect, feed, speak
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import EngineFull, InvalidText, StreamFailed
from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.runtime import engine_wire as wire
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.engine_host import _Client, _Roster
from voicewire.engine.runtime.engine_process import (
    START_TIMEOUT_S,
    EngineProcess,
    RestartPolicy,
    _Outbox,
    _spawn,
)
from voicewire.engine.runtime.stream import Mark, StreamResult
from voicewire.engine.runtime.text_stream import PackedTokens, TextToken
from voicewire.engine.voice import Voice


def test_the_same_codes_and_audio_as_in_process(
    remote: EngineProcess, config: EngineConfig, tiny_models
) -> None:
    async def run(engine):
        voice = await engine.voice(speaker="serena", language="english")
        await engine.check_voice(voice)
        streams = [engine.open_stream(voice, GREEDY) for _ in range(2)]
        heard = await asyncio.gather(*(speak(s, [TEXT[:30], TEXT[30:]]) for s in streams))
        return heard, [await s.wait() for s in streams]

    there, results = asyncio.run(run(remote))
    with Engine(tiny_models["custom_voice"], config) as local:
        here, _ = asyncio.run(run(local))
    assert remote.info == local.info
    for a, b in zip(there, here, strict=True):
        assert a.codes.shape == (30, 16)
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.text_ids, b.text_ids)
        # Decode batches form by timing, and batch size moves float sums in the last bits.
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-5)
        assert [c.text for c in a.chunks] == [c.text for c in b.chunks]
    assert [r.reason for r in results] == ["max_frames"] * 2
    assert results[0].samples_generated == 30 * 1920
    assert remote.live_streams == 0 and remote.healthy


def test_text_in_any_pieces_reaches_the_engine_as_the_ids_of_the_whole_text(
    remote: EngineProcess, config: EngineConfig, tiny_models
) -> None:
    """The server tokenizes: text pushed in arbitrary pieces (mid-word, single characters, empty,
    refused text between them) gives the engine's stream the ids of the whole text, so the frames'
    text ids, the codes and the chunks' text are those of the text pushed at once in one process."""
    rng = random.Random(5)
    cuts = sorted(rng.sample(range(1, len(TEXT)), 24))
    pieces = [TEXT[a:b] for a, b in zip([0, *cuts], [*cuts, len(TEXT)], strict=True)]
    pieces[4:5] = ["", *pieces[4]]  # an empty push, and one piece a character at a time
    assert "".join(pieces) == TEXT

    async def in_pieces(engine: EngineProcess):
        stream = engine.open_stream(await engine.voice(speaker="serena", language="english"), GREEDY)
        reading = asyncio.ensure_future(collect(stream))
        for piece in pieces:
            stream.push_text(piece)
            with pytest.raises(InvalidText, match="UTF-8 cannot encode"):
                stream.push_text("x\udc80")  # refused in the caller, before the tokenizer sees it
            await asyncio.sleep(0)  # each piece in a batch of its own
        stream.end()
        return await reading

    async def at_once(engine: Engine):
        return await speak(
            engine.open_stream(await engine.voice(speaker="serena", language="english"), GREEDY), [TEXT]
        )

    there = asyncio.run(in_pieces(remote))
    with Engine(tiny_models["custom_voice"], config) as local:
        here = asyncio.run(at_once(local))
    ids = tiny_models["custom_voice"].tokenizer.encode(TEXT)
    assert there.text_ids.tolist() == ids[1 : 1 + len(there.text_ids)]  # the first id is in the prompt
    np.testing.assert_array_equal(there.text_ids, here.text_ids)
    np.testing.assert_array_equal(there.codes, here.codes)
    assert [c.text for c in there.chunks] == [c.text for c in here.chunks]
    assert "".join(c.text for c in there.chunks) == TEXT[: there.chunks[-1].text_end]


def test_a_flush_and_the_end_come_after_the_text_before_them(
    remote: EngineProcess, config: EngineConfig, tiny_models
) -> None:
    """A flush or the end crosses with the tokenizer's tail in one message, so the engine hears
    the partial word before the mark, as `Stream.flush` and `end` have it in one process."""

    async def run(engine):
        stream = engine.open_stream(await engine.voice(speaker="ryan"), GREEDY)
        reading = asyncio.ensure_future(collect(stream))
        stream.push_text("Hello there, fri")
        stream.flush()
        stream.push_text("end of mine, wh")
        stream.end()
        return await reading

    there = asyncio.run(run(remote))
    with Engine(tiny_models["custom_voice"], config) as local:
        here = asyncio.run(run(local))
    assert "".join(c.text for c in there.chunks) == "Hello there, fri"
    np.testing.assert_array_equal(there.text_ids, here.text_ids)
    np.testing.assert_array_equal(there.codes, here.codes)
    assert [(c.text, c.text_end, c.flushed) for c in there.chunks] == [
        (c.text, c.text_end, c.flushed) for c in here.chunks
    ]


@pytest.fixture
def paired(config: EngineConfig, tiny_models):
    """A server's `EngineProcess` and the engine process's end of its connection (`_Client`, over an
    `Engine`) in this process, joined by a pipe: the test can look at the engine's own streams."""
    engine = Engine(tiny_models["custom_voice"], config)
    ours, theirs = multiprocessing.Pipe()
    voices = concurrent.futures.ThreadPoolExecutor(1)
    # The greeting (its tokenizer) can outgrow the pipe's buffer: written as the server reads it.
    greeting = threading.Thread(
        target=wire.write, args=(theirs, wire.Ready(engine.info, config, engine.model.tokenizer))
    )
    greeting.start()
    server = EngineProcess(ours, wire.read(ours), "no address", b"")
    greeting.join()
    client = _Client(engine, theirs, "server-1", voices, _Roster())
    yield server, client
    server.close()
    voices.shutdown()
    engine.close()


def test_the_engines_stream_has_its_first_text_time_from_a_push_that_commits_nothing(paired) -> None:
    server, client = paired

    async def run():
        handle = server.open_stream(await server.voice(speaker="ryan"), GREEDY)
        await asyncio.wait_for(_until_async(lambda: handle.id in client.streams), 10)
        stream = client.streams[handle.id]
        assert stream.first_text_at is None  # opened, no text yet
        before = time.monotonic()
        handle.push_text("Hel")  # a partial word: no token yet
        await asyncio.wait_for(_until_async(lambda: stream.first_text_at is not None), 10)
        first = stream.first_text_at
        assert first is not None and first >= before
        heard = await speak(handle, ["lo there."])
        assert stream.first_text_at == first  # the first push only
        return heard

    heard = asyncio.run(run())
    assert "".join(c.text for c in heard.chunks).startswith("Hello there.")


def test_a_second_server_shares_the_engine_and_its_streams_end_with_it(remote: EngineProcess) -> None:
    async def two_at_once(other: EngineProcess):
        ours = remote.open_stream(await remote.voice(speaker="serena"), GREEDY)
        theirs = other.open_stream(await other.voice(speaker="serena"), GREEDY)
        return await asyncio.gather(speak(ours, [TEXT]), speak(theirs, [TEXT]))

    async def hold_every_slot(other: EngineProcess):
        long = StreamOptions(max_frames=10_000, suppress_eos=True)
        held = [other.open_stream(await other.voice(speaker="ryan"), long) for _ in range(3)]
        for s in held:
            await feed(s, [TEXT], end=False)
        await anext(held[0])
        voice = await remote.voice(speaker="ryan")
        while remote.live_streams < 3:  # the engine tells every server its count
            await asyncio.sleep(0.01)
        with pytest.raises(EngineFull, match="all 3 stream slots"):  # the engine, not this side, is full
            remote.open_stream(voice)

    with EngineProcess.connect(remote.address, remote.authkey) as other:
        assert other.info == remote.info and other.config == remote.config and other.pid is None
        ours, theirs = asyncio.run(two_at_once(other))
        np.testing.assert_array_equal(ours.codes, theirs.codes)
        asyncio.run(hold_every_slot(other))
    # Gone: the engine cancelled its three streams, so every slot is free again.
    fill_every_slot(remote)
    assert remote.healthy


def test_a_slot_freed_by_one_server_wakes_a_waiter_in_another(remote: EngineProcess) -> None:
    """The engine process tells every server when it has room again (watch_slots), so a context
    waiting in line in one worker (server/admission.py) gets a slot another worker let go of."""
    from voicewire.server.admission import Admission
    from voicewire.server.config import ServerConfig
    from voicewire.server.metrics import Metrics

    async def run(other: EngineProcess) -> float:
        voice = await other.voice(speaker="ryan")
        held = [other.open_stream(voice, StreamOptions()) for _ in range(3)]  # no text: no work
        await asyncio.wait_for(_until_async(lambda: remote.live_streams == 3), 10)
        admission = Admission(remote, ServerConfig(slot_wait_s=5.0), Metrics())
        waiter = asyncio.create_task(admission.open_stream(await remote.voice(speaker="ryan"), GREEDY))
        await asyncio.wait_for(_until_async(lambda: admission.waiting == 1), 10)
        started = time.monotonic()
        held[0].cancel()
        stream = await asyncio.wait_for(waiter, 5)
        admitted_after = time.monotonic() - started
        for s in [stream, *held[1:]]:
            s.cancel()
        # Every stream ends. (Not remote.live_streams == 0: a server hears the engine's count with
        # its own streams' batches and on full/not-full changes only, so after the other server's
        # streams end its figure may stay behind until its next batch.)
        results = [await asyncio.wait_for(s.wait(), 10) for s in [stream, *held]]
        assert {r.reason for r in results} == {"cancelled"}, results
        return admitted_after

    with EngineProcess.connect(remote.address, remote.authkey) as other:
        assert asyncio.run(run(other)) < 2.0


async def _until_async(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_a_wrong_key_is_refused(remote: EngineProcess) -> None:
    with pytest.raises(multiprocessing.AuthenticationError):
        EngineProcess.connect(remote.address, b"not the key")
    assert remote.healthy


async def _kill_mid_stream(engine: EngineProcess) -> StreamResult:
    """Open a stream, kill the engine process once audio flows; the stream fails clearly."""
    stream = engine.open_stream(
        await engine.voice(speaker="ryan"), StreamOptions(max_frames=10_000, suppress_eos=True)
    )
    await feed(stream, [TEXT], end=False)
    await anext(stream)
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)
    with pytest.raises(StreamFailed, match="the engine process exited"):
        await asyncio.wait_for(collect(stream), 30)
    return await stream.wait()


def test_a_dead_engine_process_is_started_again_and_its_workers_join_it(config: EngineConfig) -> None:
    """Its streams fail clearly; `healthy` is false until another engine process is ready on the
    same socket; then the owner and a worker connected to it both serve new streams."""
    lost: list[str] = []
    with EngineProcess.start(config, on_lost=lambda: lost.append("owner")) as engine:
        worker = EngineProcess.connect(engine.address, engine.authkey, on_lost=lambda: lost.append("worker"))
        threads = _connection_threads()  # the module's engine process's connection has some too
        first_pid = engine.pid
        result = asyncio.run(_kill_mid_stream(engine))
        assert result.reason == "error" and engine.live_streams == 0
        with pytest.raises(StreamFailed, match="engine process is gone"):
            asyncio.run(_open_one(engine))
        until(lambda: engine.healthy and worker.healthy, 120)
        assert engine.pid != first_pid and engine.restarts == 1 and worker.restarts == 1
        # Each new connection has a reader and a writer of its own; the dead ones' threads are gone.
        until(lambda: _connection_threads() == threads, 10)
        for client in (engine, worker):
            heard = asyncio.run(_speak_one(client))
            assert heard.codes.shape == (30, 16)
        assert lost == [] and not engine.exited
        worker.close()


def test_a_worker_whose_first_greeting_is_cut_short_joins_the_next_engine_process(
    config: EngineConfig, tmp_path
) -> None:
    """An engine process that dies while a worker reads its greeting: the worker's first join
    waits for the engine process its owner starts next on the same socket, as a rejoin does."""
    address, authkey = str(tmp_path / "engine.sock"), os.urandom(32)
    dying = Listener(address, family="AF_UNIX", authkey=authkey)
    with concurrent.futures.ThreadPoolExecutor(1) as joining:
        joined = joining.submit(EngineProcess.connect, address, authkey)
        conn = dying.accept()  # the worker, past the key's challenge, reads its greeting now
        # Half a greeting, then gone: the length says 1,000 bytes, 7 come.
        os.write(conn.fileno(), struct.pack("!i", 1000) + b"partial")
        conn.close()
        dying.close()  # and its socket file with it, as the owner removes a dead one's
        process, control = _spawn(config, address, authkey, START_TIMEOUT_S)
        try:
            with joined.result(timeout=120) as worker:
                assert worker.healthy and worker.restarts == 0
                assert asyncio.run(_speak_one(worker)).codes.shape == (30, 16)
        finally:
            wire.write(control, wire.Close())
            process.join(timeout=60)
    assert process.exitcode == 0


def _connection_threads() -> collections.Counter[str]:
    """This process's threads of engine-process connections (readers, writers, restarts), by name."""
    return collections.Counter(
        t.name for t in threading.enumerate() if t.name.startswith("voicewire-engine-")
    )


def test_an_engine_process_that_keeps_dying_is_given_up(config: EngineConfig) -> None:
    """More deaths than the policy allows in its window: no new engine process, `on_lost` once,
    and `exited` for `voicewire serve` to exit non-zero."""
    lost: list[str] = []
    policy = RestartPolicy(max_deaths=1, window_s=300)
    with EngineProcess.start(config, on_lost=lambda: lost.append("gone"), restarts=policy) as engine:
        asyncio.run(_kill_mid_stream(engine))
        until(lambda: engine.healthy, 120)  # the first death is started again
        asyncio.run(_kill_mid_stream(engine))
        until(lambda: lost == ["gone"], 30)
        assert engine.exited and not engine.healthy and engine.restarts == 1


def test_without_restarts_a_dead_engine_process_is_lost(config: EngineConfig) -> None:
    lost: list[str] = []
    with EngineProcess.start(config, on_lost=lambda: lost.append("gone"), restarts=None) as engine:
        result = asyncio.run(_kill_mid_stream(engine))
        until(lambda: lost == ["gone"], 30)
        assert result.reason == "error" and engine.exited and not engine.healthy and engine.live_streams == 0


async def _open_one(engine: EngineProcess) -> None:
    engine.open_stream(Voice(speaker="ryan"))


async def _speak_one(engine: EngineProcess):
    return await speak(engine.open_stream(await engine.voice(speaker="ryan"), GREEDY), [TEXT])


def test_a_checkpoint_that_does_not_load_is_a_clear_start_error(tmp_path) -> None:
    started = time.monotonic()
    with pytest.raises(CheckpointError, match="is neither a checkpoint folder nor a Hugging Face repo id"):
        EngineProcess.start(EngineConfig(model=str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="unknown dtype"):
        EngineProcess.start(EngineConfig(model="tiny", dtype="float8"))
    assert time.monotonic() - started < 60


# --- requests in batches -----------------------------------------------------------------------


def _word(stream_id: int, word: str) -> wire.Tokens:
    """A push of one token, as a server sends it: any request, to the outbox."""
    return wire.Tokens(stream_id, PackedTokens.of([TextToken(7, word, len(word), False)]))


def _mark(stream_id: int, mark: Mark) -> wire.Tokens:
    return wire.Tokens(stream_id, PackedTokens.of([]), mark)


def test_requests_put_together_go_as_one_message_in_order_with_each_streams_last_acknowledgement() -> None:
    ours, theirs = multiprocessing.Pipe()
    outbox = _Outbox(ours, lambda request, error: None)
    requests = [
        wire.Open(1, Voice(speaker="ryan"), GREEDY),
        _word(1, "Hello"),
        _word(2, "there"),
        _mark(1, Mark.FLUSH),
        wire.Cancel(2),
        wire.Call(7, "voice", (), {"speaker": "ryan"}),
        _word(1, "again"),
    ]
    for request, ack in zip(
        requests, [None, (1, 1920), (2, 960), None, (1, 3840), None, (1, 5760)], strict=True
    ):
        outbox.put(request)
        if ack is not None:
            outbox.acknowledge(*ack)
    outbox.start()  # the writer finds all of them waiting
    assert theirs.poll(5)
    assert pickle.loads(theirs.recv_bytes()) == (requests, {1: 5760, 2: 960})
    assert not theirs.poll(0.2)
    outbox.put(_mark(1, Mark.END))
    outbox.close()  # what was put before goes out; nothing after
    outbox.put(_word(1, "late"))
    outbox.acknowledge(1, 7680)
    assert pickle.loads(theirs.recv_bytes()) == ([_mark(1, Mark.END)], {})
    assert not theirs.poll(0.2)


def test_what_one_loop_iteration_puts_is_one_message() -> None:
    ours, theirs = multiprocessing.Pipe()
    outbox = _Outbox(ours, lambda request, error: None).start()
    requests = [r for i in range(50) for r in (wire.Open(i, Voice(speaker="ryan"), GREEDY), _word(i, "Hi."))]

    async def one_iteration() -> None:
        for i, request in enumerate(requests):
            outbox.put(request)
            outbox.acknowledge(i % 3, i)
        assert not theirs.poll(0.2)  # the writer is woken by the loop's next iteration, not before
        await asyncio.sleep(0)

    asyncio.run(one_iteration())
    assert theirs.poll(5)
    assert pickle.loads(theirs.recv_bytes()) == (requests, {0: 99, 1: 97, 2: 98})
    assert not theirs.poll(0.2)
    outbox.close()


def test_requests_left_by_a_loop_that_stopped_are_written_when_the_reader_looks() -> None:
    ours, theirs = multiprocessing.Pipe()
    outbox = _Outbox(ours, lambda request, error: None).start()
    loop = asyncio.new_event_loop()
    loop.call_soon(lambda: (outbox.put(wire.Cancel(1)), loop.stop()))
    loop.run_forever()  # stops before the iteration that would wake the writer
    loop.close()
    assert not theirs.poll(0.2)
    outbox.wake_if_stalled()  # the connection's reader, as the engine's next events come
    assert theirs.poll(5) and pickle.loads(theirs.recv_bytes()) == ([wire.Cancel(1)], {})
    outbox.close()


def test_a_request_that_cannot_be_pickled_is_refused_and_the_rest_of_its_batch_goes() -> None:
    ours, theirs = multiprocessing.Pipe()
    refused: list[tuple[object, type]] = []
    outbox = _Outbox(ours, lambda request, error: refused.append((request, type(error))))
    bad = wire.Call(3, "check_voice", (threading.Lock(),), {})
    for request in [_word(1, "a"), bad, _word(1, "b")]:
        outbox.put(request)
    outbox.start()
    assert pickle.loads(theirs.recv_bytes()) == ([_word(1, "a"), _word(1, "b")], {})
    assert refused == [(bad, TypeError)]
    outbox.close()


def test_a_call_or_stream_that_cannot_be_sent_fails_with_the_reason(remote: EngineProcess) -> None:
    unpicklable = Voice(speaker=threading.Lock())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot pickle"):
        asyncio.run(remote.check_voice(unpicklable))

    async def open_it() -> StreamResult:
        stream = remote.open_stream(unpicklable, GREEDY)
        with pytest.raises(StreamFailed, match="could not send it to the engine process: cannot pickle"):
            await asyncio.wait_for(collect(stream), 10)
        return await stream.wait()

    assert asyncio.run(open_it()).reason == "error"
    assert asyncio.run(_speak_one(remote)).codes.shape == (30, 16) and remote.healthy

    async def refused_then_fill() -> list:
        voice = await remote.voice(speaker="ryan")
        await remote.check_voice(voice)  # a reply: this server's count of the engine's streams is fresh
        refused = remote.open_stream(unpicklable, GREEDY)
        with pytest.raises(StreamFailed, match="cannot pickle"):
            await asyncio.wait_for(collect(refused), 10)
        # No message from the engine in between (nothing else runs): every slot must still open.
        streams = [remote.open_stream(voice, GREEDY) for _ in range(remote.config.max_streams)]
        return await asyncio.gather(*(speak(s, ["Hi."]) for s in streams))

    assert [h.codes.shape for h in asyncio.run(refused_then_fill())] == [(30, 16)] * 3


def test_a_worker_sees_its_owner_gone_before_it_looked() -> None:
    """A worker's parent owns the engine process: once it is gone nobody starts another, and a
    worker waiting to join must stop, even one whose parent was gone before it first looked (its
    parent pid is then its reaper's). Seen through multiprocessing's parent sentinel."""
    context = multiprocessing.get_context("spawn")
    told: multiprocessing.Queue = context.Queue()
    child = context.Process(target=orphan.start_watcher_and_leave, args=(told,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert told.get(timeout=60) is False


# A server worker joins the engine process while uvicorn loads its app, and uvicorn's SIGTERM handler
# then only notes the signal for after the load.
JOIN_UNDER_UVICORN = """
import signal, sys
from voicewire.engine.runtime.engine_process import EngineProcess
signal.signal(signal.SIGTERM, lambda signum, frame: None)
print("joining", flush=True)
EngineProcess.connect(sys.argv[1], b"key")
"""


def test_sigterm_stops_a_worker_waiting_to_join_an_engine_process(tmp_path) -> None:
    """Nothing listens where it joins (an engine process being started again): it retries until
    SIGTERM, which its server sends when it stops, and then exits saying why."""
    process = subprocess.Popen(
        [sys.executable, "-c", JOIN_UNDER_UVICORN, str(tmp_path / "engine.sock")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "joining\n"
        time.sleep(1)  # a few of its tries, REJOIN_EVERY_S apart
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1
    assert "stopped by SIGTERM while joining the engine process" in err
