"""One SQLite file of tool state: opened lazily in WAL mode with its schema, closed at shutdown.

Tenants' memories and notes are private: the file (and SQLite's -wal/-shm, which copy its
mode) is 0600, narrowed so where an older version made it readable by every local user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import aiosqlite


class SqliteFile:
    """Base of the tool-state stores; subclasses set `SCHEMA` (idempotent DDL)."""

    SCHEMA: ClassVar[str] = ""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None

    async def open(self) -> None:
        if self._db is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _private(self.path)
        db = await aiosqlite.connect(self.path)
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA foreign_keys=ON")
            await db.executescript(self.SCHEMA)
            await db.commit()
        except BaseException:
            await db.close()
            raise
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            await self.open()
        assert self._db is not None
        return self._db


def _private(path: Path) -> None:
    """Create ``path`` 0600 (never through a symlink), or narrow it and its journals to 0600."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        try:
            fd = os.open(f"{path}{suffix}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
