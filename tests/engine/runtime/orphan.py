"""Processes for test_engine_process's orphaned worker, in a module of their own: a spawned child
imports its target's module, and this one is light (the grandchild alone imports the engine)."""

import multiprocessing
import os
import time


def watch_owner(told: multiprocessing.Queue) -> None:
    """A grandchild, as a worker whose server died before it read its parent: once it is another
    process's child (its parent gone), it reads its parent pid then and asks whether its owner lives."""
    from voicewire.engine.runtime.engine_process import _owner_alive

    first, deadline = os.getppid(), time.monotonic() + 30
    while os.getppid() == first and time.monotonic() < deadline:
        time.sleep(0.02)
    told.put(_owner_alive(os.getppid()))


def start_watcher_and_leave(told: multiprocessing.Queue) -> None:
    """The test's child: start a grandchild, then die at once (os._exit: multiprocessing would
    wait for the grandchild at a normal exit, as a server does for its workers)."""
    context = multiprocessing.get_context("spawn")
    context.Process(target=watch_owner, args=(told,)).start()
    os._exit(0)
