"""The multiprocess metrics folder of `voicewire serve`: made per server, removed after, and the
folders of servers that died without cleaning up removed by the next one."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from voicewire.server.metrics_dir import MULTIPROCESS_DIR, PREFIX, multiprocess_dir


@pytest.fixture
def temp(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(MULTIPROCESS_DIR, raising=False)
    return tmp_path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_fresh_folder_named_after_the_server_and_removed_after(temp: Path) -> None:
    with multiprocess_dir() as folder:
        assert folder == temp / f"{PREFIX}{os.getpid()}" and folder.is_dir()
        assert os.environ[MULTIPROCESS_DIR] == str(folder)
        (folder / "counter_123.db").write_bytes(b"x")
    assert not folder.exists()
    assert MULTIPROCESS_DIR not in os.environ


def test_folders_of_dead_servers_go_and_others_stay(temp: Path) -> None:
    dead = temp / f"{PREFIX}{_dead_pid()}"
    living = temp / f"{PREFIX}{os.getppid()}"
    other = temp / f"{PREFIX}notes"
    for folder in (dead, living, other):
        folder.mkdir()
        (folder / "gauge_livesum_1.db").write_bytes(b"x")
    with multiprocess_dir():
        assert not dead.exists()
        assert living.is_dir() and other.is_dir()


def test_a_folder_set_in_the_environment_is_kept(temp: Path, monkeypatch) -> None:
    mine = temp / "mine"
    mine.mkdir()
    monkeypatch.setenv(MULTIPROCESS_DIR, str(mine))
    with multiprocess_dir() as folder:
        assert folder == mine
    assert mine.is_dir() and os.environ[MULTIPROCESS_DIR] == str(mine)
