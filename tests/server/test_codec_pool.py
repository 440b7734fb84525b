"""The codec threads take the job due first, whatever order the jobs came in."""

import asyncio
import threading
import time
from concurrent.futures import CancelledError

import pytest

from voicewire.engine.runtime.metrics import thread_group
from voicewire.server.codec_pool import CodecPool


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
