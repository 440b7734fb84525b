"""The folder of prometheus-client's multiprocess mode, for `voicewire serve`.

A served voicewire is several processes: the engine's, and one or more server workers, any of
which may answer a scrape. In multiprocess mode each process writes its metric values to files in
one folder, and `/metrics` sums them all. prometheus-client picks the mode when it is first
imported, from the environment, so the folder is set before any process imports it: this module
does not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "voicewire-metrics-"


@contextmanager
def multiprocess_dir() -> Iterator[Path]:
    """A fresh folder for the values of every process started inside (they inherit the
    environment), removed afterwards. A folder the environment already names is used as it is.

    The folder is named after this process. A server that died without cleaning up (SIGKILL, or
    uvicorn re-raising SIGTERM) leaves its folder behind; the next one removes those of dead
    processes."""
    if MULTIPROCESS_DIR in os.environ:
        yield Path(os.environ[MULTIPROCESS_DIR])
        return
    parent = Path(tempfile.gettempdir())
    for stale in parent.glob(f"{PREFIX}*"):
        owner = stale.name.removeprefix(PREFIX)
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(stale, ignore_errors=True)
    folder = parent / f"{PREFIX}{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)  # a dead process's, with our pid
    folder.mkdir(mode=0o700)
    os.environ[MULTIPROCESS_DIR] = str(folder)
    try:
        yield folder
    finally:
        del os.environ[MULTIPROCESS_DIR]
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
