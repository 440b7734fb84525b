"""The codec threads take the job due first, whatever order the jobs came in, and run as much
nicer than their process as the profile says."""

import asyncio
import os
import threading
import time
from concurrent.futures import CancelledError

import pytest

from tests.server.conftest import running_server
from voicewire.engine.runtime.metrics import thread_group
from voicewire.server.codec_pool import CodecPool, JobTimes
from voicewire.server.config import ServerConfig


def _blocked(pool: CodecPool) -> threading.Event:
    """Holds the pool's one thread until the returned event is set."""
    release, running = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        release.wait()

    pool.submit_due(0.0, hold)
    assert running.wait(5)
    return release


def test_the_earliest_deadline_runs_first_and_ties_keep_their_order() -> None:
    pool = CodecPool(1)
    ran: list[str] = []
    release = _blocked(pool)
    futures = [
        pool.submit_due(due, ran.append, name)
        for due, name in [(5.0, "late"), (2.0, "first tie"), (1.0, "earliest"), (2.0, "second tie")]
    ]
    release.set()
    assert [future.result(5) for future in futures] == [None] * 4
    assert ran == ["earliest", "first tie", "second tie", "late"]
    pool.shutdown()


def test_submit_is_due_now_so_a_listener_already_dry_goes_ahead() -> None:
    pool = CodecPool(1)
    ran: list[str] = []
    release = _blocked(pool)
    now = time.monotonic()
    later = pool.submit_due(now + 60, ran.append, "a minute in hand")
    plain = pool.submit(ran.append, "submitted")
    dry = pool.submit_due(now - 1, ran.append, "dry a second ago")
    release.set()
    for future in (later, plain, dry):
        future.result(5)
    assert ran == ["dry a second ago", "submitted", "a minute in hand"]
    pool.shutdown()


def test_results_and_errors_reach_the_caller_and_the_thread_goes_on() -> None:
    pool = CodecPool(2)
    failed = pool.submit_due(0.0, int, "not a number")
    with pytest.raises(ValueError, match="not a number"):
        failed.result(5)
    assert pool.submit(divmod, 17, 5).result(5) == (3, 2)
    assert pool.submit(lambda *, base: int("ff", base), base=16).result(5) == 255

    async def awaited() -> list[int]:  # as the sessions and run_in_executor await it
        loop = asyncio.get_running_loop()
        return [
            await asyncio.wrap_future(pool.submit_due(1.0, len, "four")),
            await loop.run_in_executor(pool, len, "three"),
        ]

    assert asyncio.run(awaited()) == [4, 5]
    pool.shutdown()


def test_its_threads_count_as_codec() -> None:
    # Only this pool's threads: another test's pool may still be running (its threads are daemons).
    before = set(threading.enumerate())
    pool = CodecPool(3)
    names = sorted(thread.name for thread in set(threading.enumerate()) - before)
    assert names == ["voicewire-codec_0", "voicewire-codec_1", "voicewire-codec_2"]
    assert {thread_group(name) for name in names} == {"codec"}
    pool.shutdown()
    assert not set(threading.enumerate()) - before


def test_shutdown_runs_what_is_queued_or_cancels_it_and_refuses_more() -> None:
    pool = CodecPool(1)
    release = _blocked(pool)
    queued = pool.submit_due(1.0, len, "runs")
    release.set()
    pool.shutdown()
    assert queued.result(0) == 4
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(len, "too late")

    pool = CodecPool(1)
    release = _blocked(pool)
    dropped = pool.submit_due(1.0, len, "dropped")
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    with pytest.raises(CancelledError):
        dropped.result(5)
    pool.shutdown()  # again: a no-op that waits for the threads


def test_a_job_cancelled_while_queued_never_runs() -> None:
    pool = CodecPool(1)
    ran: list[str] = []
    release = _blocked(pool)
    cancelled = pool.submit_due(1.0, ran.append, "cancelled")
    kept = pool.submit_due(2.0, ran.append, "kept")
    assert cancelled.cancel()
    release.set()
    kept.result(5)
    assert ran == ["kept"]
    pool.shutdown()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="needs a thread"):
        CodecPool(0)


def test_nice_threads_run_that_much_below_the_process() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base > 14:
        pytest.fail(f"this process already runs at nice {base}: no room for 5 more")
    pool = CodecPool(2, nice=5)

    def nice_of_this_thread() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert {pool.submit(nice_of_this_thread).result(5) for _ in range(8)} == {base + 5}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's stays
    pool.shutdown()
    plain = CodecPool(1)
    assert plain.submit(nice_of_this_thread).result(5) == base
    plain.shutdown()
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice is 0-19"):
            CodecPool(1, nice=bad)


def test_a_server_s_codec_threads_take_the_profile_s_nice(tiny_models) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    with running_server(tiny_models["custom_voice"], ServerConfig(codec_threads=2, codec_nice=3)):
        deadline = time.monotonic() + 10
        while True:  # each thread renices itself as it starts
            codec = [t for t in threading.enumerate() if t.name.startswith("voicewire-codec_")]
            nice = [os.getpriority(os.PRIO_PROCESS, t.native_id) for t in codec if t.native_id]
            if nice == [base + 3] * 2 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert nice == [base + 3] * 2


def test_each_job_reports_how_late_it_started_its_run_and_its_time_off_a_cpu() -> None:
    """Held 0.2 s behind a blocked thread, a job due a second ago started at least 0.2 s late
    (from when it was queued), and one due in a minute started early (0); a job that sleeps 0.1 s
    ran at least that long, off a CPU; one that spins 0.05 s on its thread used a CPU for most of
    it. Times are bounds from below, which no slow machine breaks."""
    heard: list[JobTimes] = []
    pool = CodecPool(1, on_job=heard.append)
    release = _blocked(pool)
    now = time.monotonic()
    overdue = pool.submit_due(now - 1, time.sleep, 0.1)
    early = pool.submit_due(now + 60, lambda: None)

    def spin() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    spinning = pool.submit_due(now + 30, spin)
    time.sleep(0.2)
    release.set()
    for future in (overdue, spinning, early):
        future.result(5)
    pool.shutdown()
    held, slept, spun, idle = heard
    assert held.run >= 0.2 and held.stalled >= 0.19  # the blocking job waits on an event, off a CPU
    assert slept.late >= 0.2 and slept.run >= 0.1 and slept.stalled >= 0.09
    assert spun.late == 0.0 and spun.run >= 0.05 and spun.stalled <= spun.run - 0.05
    assert idle.late == 0.0 and 0.0 <= idle.stalled <= idle.run
