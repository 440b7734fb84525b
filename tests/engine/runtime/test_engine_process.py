"""The engine in its own process, beyond the contract both engines share (test_contract.py): the
same audio as in this process, several servers on one engine, its key, and a child that dies."""

import asyncio
import multiprocessing
import os
import pickle
import signal
import time

import numpy as np
import pytest

from tests.engine.streaming import collect, feed, speak
from voicewire.engine.config import EngineConfig, StreamOptions
from voicewire.engine.errors import (
    EngineError,
    EngineFull,
    StreamFailed,
)
from voicewire.engine.model.checkpoint import CheckpointError
from voicewire.engine.model.prompt import Voice
from voicewire.engine.runtime.engine import Engine
from voicewire.engine.runtime.engine_process import EngineProcess, RestartPolicy
from voicewire.engine.runtime.stream import StreamResult

TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun."
GREEDY = StreamOptions(greedy=True, max_frames=30, suppress_eos=True)


@pytest.fixture(scope="module")
def config(tiny_checkpoints) -> EngineConfig:
    return EngineConfig(model=str(tiny_checkpoints["custom_voice"]), max_streams=3, kv_length=256)


@pytest.fixture(scope="module")
def remote(config: EngineConfig):
    with EngineProcess.start(config) as engine:
        yield engine


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

    async def fill():
        streams = [remote.open_stream(await remote.voice(speaker="ryan"), GREEDY) for _ in range(3)]
        return await asyncio.gather(*(speak(s, ["Hi."]) for s in streams))

    deadline = time.monotonic() + 30
    while True:
        try:
            heard = asyncio.run(fill())
            break
        except EngineFull:
            assert time.monotonic() < deadline, "the disconnected server's streams kept their slots"
            time.sleep(0.2)
    assert [h.codes.shape for h in heard] == [(30, 16)] * 3
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


def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


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
        first_pid = engine.pid
        result = asyncio.run(_kill_mid_stream(engine))
        assert result.reason == "error" and engine.live_streams == 0
        with pytest.raises(StreamFailed, match="engine process is gone"):
            asyncio.run(_open_one(engine))
        _until(lambda: engine.healthy and worker.healthy, 120)
        assert engine.pid != first_pid and engine.restarts == 1 and worker.restarts == 1
        for client in (engine, worker):
            heard = asyncio.run(_speak_one(client))
            assert heard.codes.shape == (30, 16)
        assert lost == [] and not engine.exited
        worker.close()


def test_an_engine_process_that_keeps_dying_is_given_up(config: EngineConfig) -> None:
    """More deaths than the policy allows in its window: no new engine process, `on_lost` once,
    and `exited` for `voicewire serve` to exit non-zero."""
    lost: list[str] = []
    policy = RestartPolicy(max_deaths=1, window_s=300)
    with EngineProcess.start(config, on_lost=lambda: lost.append("gone"), restarts=policy) as engine:
        asyncio.run(_kill_mid_stream(engine))
        _until(lambda: engine.healthy, 120)  # the first death is started again
        asyncio.run(_kill_mid_stream(engine))
        _until(lambda: lost == ["gone"], 30)
        assert engine.exited and not engine.healthy and engine.restarts == 1


def test_without_restarts_a_dead_engine_process_is_lost(config: EngineConfig) -> None:
    lost: list[str] = []
    with EngineProcess.start(config, on_lost=lambda: lost.append("gone"), restarts=None) as engine:
        result = asyncio.run(_kill_mid_stream(engine))
        _until(lambda: lost == ["gone"], 30)
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


def test_engine_errors_keep_their_code_across_processes() -> None:
    error = pickle.loads(pickle.dumps(EngineError("too slow", code="custom_code")))
    assert error.code == "custom_code" and error.message == "too slow"
    full = pickle.loads(pickle.dumps(EngineFull("no slots")))
    assert type(full) is EngineFull and full.code == "engine_full"
