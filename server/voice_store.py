"""The voice library's storage: cloned voices in one SQLite database (stdlib sqlite3, WAL mode) in
the data folder, with no loose files.

A row holds what the engine computed from the reference audio once (the x-vector, and for
in-context voices the reference codes and text) and what it fits: a voice is spoken only by a
checkpoint of the same family and hidden size. Every write is one transaction, so a process
killed mid-upload leaves either the whole voice or none. The schema is versioned with
`PRAGMA user_version`; `migrate` brings an older database up to date.

The calls block (a few milliseconds each). Callers on an event loop run them with
`asyncio.to_thread`; one connection per store, serialized by a lock. WAL lets several server
processes (`server.workers`) share the file; `busy_timeout` makes writers queue, not fail.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DATABASE = "voices.sqlite3"


@dataclass(frozen=True)
class StoredVoice:
    id: str
    owner: str  # owner_hash() of the identity that made it
    name: str
    description: str
    created: float  # Unix time
    family: str  # checkpoint_family() of the checkpoint that computed it
    variant: str  # that checkpoint's variant (base)
    hidden_size: int  # the x-vector's length: the talker width it fits
    xvector: np.ndarray  # [hidden_size] float32
    ref_codes: np.ndarray | None  # [frames, 16] int16: in-context voices only
    ref_text: str | None
    language: str
    duration: float  # seconds of reference audio
    content_hash: str  # sha256 of the 24 kHz reference samples and the reference text

    @property
    def in_context(self) -> bool:
        return self.ref_codes is not None

    def public(self) -> dict[str, Any]:
        """What clients see of it (never the owner)."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "created": round(self.created, 3),
            "language": self.language,
            "duration": round(self.duration, 3),
            "in_context": self.in_context,
            "ref_text": self.ref_text,
            "family": self.family,
            "hidden_size": self.hidden_size,
            "content_hash": self.content_hash,
        }


def owner_hash(identity: str) -> str:
    """An owner as stored: a digest of the caller's identity (itself a digest of its key)."""
    return hashlib.sha256(b"voicewire.voice-owner:" + identity.encode()).hexdigest()[:32]


def new_voice_id() -> str:
    return "voice_" + secrets.token_hex(8)


class TooManyVoices(Exception):
    pass


def _v1(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE voices (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            created REAL NOT NULL,
            family TEXT NOT NULL,
            variant TEXT NOT NULL,
            hidden_size INTEGER NOT NULL,
            xvector BLOB NOT NULL,           -- float32 little-endian, hidden_size values
            ref_codes BLOB,                  -- int16 little-endian, ref_frames x ref_codebooks
            ref_frames INTEGER,
            ref_codebooks INTEGER,
            ref_text TEXT,
            language TEXT NOT NULL,
            duration REAL NOT NULL,
            content_hash TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX voices_by_owner ON voices (owner, created)")


# MIGRATIONS[i] takes a database at version i to version i + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1,)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: sqlite3.Connection) -> int:
    """Bring the schema up to SCHEMA_VERSION, one transaction per step; returns the version found.
    A database from a newer voicewire is refused rather than guessed at."""
    found = db.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"the voice database has schema version {found}; this voicewire knows up to {SCHEMA_VERSION}"
        )
    for version in range(found, SCHEMA_VERSION):
        with db:  # one transaction: the step and its version number together
            db.execute("BEGIN IMMEDIATE")
            if db.execute("PRAGMA user_version").fetchone()[0] != version:
                continue  # another process migrated meanwhile
            MIGRATIONS[version](db)
            db.execute(f"PRAGMA user_version = {version + 1}")
    return found


_COLUMNS = (
    "id, owner, name, description, created, family, variant, hidden_size, xvector, ref_codes, "
    "ref_frames, ref_codebooks, ref_text, language, duration, content_hash"
)


def _with_retries(step: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Run `step`, again while the database is locked. Switching a new file to WAL needs it alone,
    and SQLite answers a second connection doing the same at that moment (two server workers
    opening the library together) with "database is locked" at once, not after its busy timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class VoiceStore:
    """Voices in `folder`/voices.sqlite3, created on first use."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / DATABASE
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE in `with db`).
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
            _with_retries(lambda: db.execute("PRAGMA journal_mode = WAL"))
            db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
            migrate(db)
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def add(self, voice: StoredVoice, max_per_owner: int | None = None, shared: bool = False) -> None:
        """Store `voice`; raises TooManyVoices when its owner (`shared`: everyone together) holds
        `max_per_owner` voices already."""
        codes = voice.ref_codes
        row = (
            voice.id,
            voice.owner,
            voice.name,
            voice.description,
            voice.created,
            voice.family,
            voice.variant,
            voice.hidden_size,
            np.ascontiguousarray(voice.xvector, dtype="<f4").tobytes(),
            None if codes is None else np.ascontiguousarray(codes, dtype="<i2").tobytes(),
            None if codes is None else codes.shape[0],
            None if codes is None else codes.shape[1],
            voice.ref_text,
            voice.language,
            voice.duration,
            voice.content_hash,
        )
        with self._lock:
            db = self._connect()
            with db:
                db.execute("BEGIN IMMEDIATE")  # the count and the insert see one state
                if max_per_owner is not None:
                    held = (
                        db.execute("SELECT COUNT(*) FROM voices")
                        if shared
                        else db.execute("SELECT COUNT(*) FROM voices WHERE owner = ?", (voice.owner,))
                    )
                    if held.fetchone()[0] >= max_per_owner:
                        raise TooManyVoices(f"this key holds {max_per_owner} voices already")
                db.execute(f"INSERT INTO voices ({_COLUMNS}) VALUES ({', '.join('?' * 16)})", row)

    def get(self, voice_id: str, owner: str | None = None) -> StoredVoice | None:
        """The voice, if it exists and belongs to `owner` (None: to anyone)."""
        query = f"SELECT {_COLUMNS} FROM voices WHERE id = ?"
        args: tuple = (voice_id,)
        if owner is not None:
            query, args = query + " AND owner = ?", (voice_id, owner)
        with self._lock:
            row = self._connect().execute(query, args).fetchone()
        return None if row is None else _voice(row)

    def list(self, owner: str | None = None) -> list[StoredVoice]:
        """Voices of `owner` (None: all), oldest first."""
        query = f"SELECT {_COLUMNS} FROM voices"
        args: tuple = ()
        if owner is not None:
            query, args = query + " WHERE owner = ?", (owner,)
        with self._lock:
            rows = self._connect().execute(query + " ORDER BY created, id", args).fetchall()
        return [_voice(row) for row in rows]

    def delete(self, voice_id: str, owner: str | None = None) -> bool:
        query = "DELETE FROM voices WHERE id = ?"
        args: tuple = (voice_id,)
        if owner is not None:
            query, args = query + " AND owner = ?", (voice_id, owner)
        with self._lock:
            db = self._connect()
            with db:
                db.execute("BEGIN IMMEDIATE")
                return db.execute(query, args).rowcount > 0

    def count(self, owner: str | None = None) -> int:
        """Voices of `owner` (None: all)."""
        with self._lock:
            db = self._connect()
            if owner is None:
                return db.execute("SELECT COUNT(*) FROM voices").fetchone()[0]
            return db.execute("SELECT COUNT(*) FROM voices WHERE owner = ?", (owner,)).fetchone()[0]


def _voice(row: tuple) -> StoredVoice:
    (id_, owner, name, description, created, family, variant, hidden, xvector, codes, frames, books) = row[
        :12
    ]
    ref_text, language, duration, content_hash = row[12:]
    return StoredVoice(
        id=id_,
        owner=owner,
        name=name,
        description=description,
        created=created,
        family=family,
        variant=variant,
        hidden_size=hidden,
        xvector=np.frombuffer(xvector, dtype="<f4").astype(np.float32),
        ref_codes=None if codes is None else np.frombuffer(codes, dtype="<i2").reshape(frames, books).copy(),
        ref_text=ref_text,
        language=language,
        duration=duration,
        content_hash=content_hash,
    )
