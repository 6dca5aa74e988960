"""One SQLite file of tool state: opened lazily in WAL mode with its schema, closed at shutdown."""

from __future__ import annotations

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
