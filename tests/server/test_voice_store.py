"""The voice library's SQLite storage: round trips, ownership, limits, restarts and migrations."""

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from voicewire.server.voice_store import (
    DATABASE,
    SCHEMA_VERSION,
    StoredVoice,
    TooManyVoices,
    VoiceStore,
    migrate,
    new_voice_id,
    owner_hash,
)


def _voice(owner: str = "a", in_context: bool = True, name: str = "Ada", created: float = 1.0) -> StoredVoice:
    rng = np.random.default_rng(len(name))
    return StoredVoice(
        id=new_voice_id(),
        owner=owner_hash(owner),
        name=name,
        description="calm",
        created=created,
        family="qwen3-tts-12hz-0b6",
        variant="base",
        hidden_size=32,
        xvector=rng.standard_normal(32).astype(np.float32),
        ref_codes=rng.integers(0, 2048, (7, 16)).astype(np.int16) if in_context else None,
        ref_text="Hello there." if in_context else None,
        language="english",
        duration=2.5,
        content_hash="ab" * 32,
    )


def _same(a: StoredVoice, b: StoredVoice) -> None:
    assert a.public() == b.public() and a.owner == b.owner and a.variant == b.variant
    assert a.xvector.dtype == np.float32 and np.array_equal(a.xvector, b.xvector)
    if a.ref_codes is None:
        assert b.ref_codes is None
    else:
        assert b.ref_codes is not None and np.array_equal(a.ref_codes, b.ref_codes)


def test_round_trip_and_survives_a_new_store(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    clone, plain = _voice(), _voice(in_context=False, name="Bo", created=2.0)
    store.add(clone)
    store.add(plain)
    store.close()
    again = VoiceStore(tmp_path)  # a server restart
    got = again.get(clone.id)
    assert got is not None and got.in_context
    _same(clone, got)
    _same(plain, again.get(plain.id))
    assert [v.id for v in again.list()] == [clone.id, plain.id]
    assert again.count() == 2
    db = sqlite3.connect(tmp_path / DATABASE)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_owners_see_and_delete_only_their_own(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    mine, theirs = _voice("a"), _voice("b")
    store.add(mine)
    store.add(theirs)
    assert store.get(mine.id, owner_hash("b")) is None
    assert [v.id for v in store.list(owner_hash("a"))] == [mine.id]
    assert not store.delete(mine.id, owner_hash("b"))
    assert store.delete(mine.id, owner_hash("a"))
    assert store.get(mine.id) is None and not store.delete(mine.id)
    assert [v.id for v in store.list()] == [theirs.id]


def test_the_limit_per_owner_is_checked_in_the_insert_transaction(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    for _ in range(3):
        store.add(_voice("a"), max_per_owner=3)
    with pytest.raises(TooManyVoices):
        store.add(_voice("a"), max_per_owner=3)
    store.add(_voice("b"), max_per_owner=3)
    assert store.count() == 4 and store.count(owner_hash("a")) == 3
    with pytest.raises(TooManyVoices):
        store.add(_voice("c"), max_per_owner=4, shared=True)  # no keys: the limit is for all


def test_concurrent_writers_from_two_stores(tmp_path: Path) -> None:
    """Two connections on one file (as two server workers have) both write, none is lost."""
    stores = [VoiceStore(tmp_path), VoiceStore(tmp_path)]
    voices = [[_voice(str(i)) for _ in range(20)] for i in range(2)]

    def write(i: int) -> None:
        for voice in voices[i]:
            stores[i].add(voice, max_per_owner=100)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stores[0].count() == 40


def test_a_failed_insert_leaves_nothing(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    voice = _voice()
    store.add(voice)
    with pytest.raises(sqlite3.IntegrityError):
        store.add(voice)  # the same id again
    assert store.count() == 1


def test_migrations_and_a_newer_schema(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.sqlite3", isolation_level=None)
    assert migrate(db) == 0
    assert migrate(db) == SCHEMA_VERSION  # idempotent
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="schema version"):
        migrate(db)


def test_two_stores_opening_a_new_library_at_once(tmp_path: Path) -> None:
    """Two workers opening the library together: switching a new file to WAL is retried while the
    other holds it (before, about one pair in seven failed with "database is locked")."""
    failures: list[BaseException] = []
    for n in range(100):
        stores = [VoiceStore(tmp_path / str(n)), VoiceStore(tmp_path / str(n))]
        together = threading.Barrier(2)

        def open_one(store: VoiceStore, together: threading.Barrier) -> None:
            together.wait()
            try:
                assert store.count() == 0
            except BaseException as exc:  # collected for the assertion below
                failures.append(exc)

        threads = [threading.Thread(target=open_one, args=(store, together)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in stores:
            store.close()
    assert failures == []
