"""Rows every request reads, kept while the database file is unchanged.

Each API request authenticates its token and most look up a session: two round trips to
the store connection's thread, ≈ 0.5 ms of a warm exec call on the dev machine. This keeps
the records instead, under one rule that makes a stale answer impossible: an entry holds
the file's ``PRAGMA data_version`` read *before* its row was, and is used only while the
version is still the same. SQLite changes that number whenever any other connection — this
process's store connection or another process's (``navi tokens revoke``) — commits to the
file, so any write at all (a revoke, a session deleted or moved to another profile) empties
the cache for the next reader. Time-based state is not cached: a token's expiry is checked
on every hit.

The version is read on the event loop from a connection of its own that never writes: in
WAL mode that reads the shared-memory index header (≈ 5 µs), no page of the file. If it
cannot be read, nothing is cached.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar, cast

T = TypeVar("T")

MAX_ENTRIES = 4096  # live tokens and sessions in use; past it, start over


class ReadCache:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._enabled = str(path) not in ("", ":memory:")  # a file another connection sees
        self._probe: sqlite3.Connection | None = None
        self._entries: dict[Hashable, tuple[int, Any]] = {}

    def version(self) -> int | None:
        """The file's data version now (None: unknown, so do not cache)."""
        if not self._enabled:
            return None
        try:
            if self._probe is None:
                uri = f"{self._path.resolve().as_uri()}?mode=ro"  # any path, percent-encoded
                self._probe = sqlite3.connect(uri, uri=True, isolation_level=None,
                                              check_same_thread=False)
                self._probe.execute("PRAGMA busy_timeout = 0")
            row = self._probe.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error:
            self.close()
            return None
        return int(row[0]) if row else None

    async def read(self, key: Hashable, load: Callable[[], Awaitable[T | None]]) -> T | None:
        """The value kept under ``key`` if nothing was committed since it was loaded, else
        ``load()``'s (kept unless None; the version is read first, then the row)."""
        version = self.version()
        entry = self._entries.get(key)
        if entry is not None and entry[0] == version:
            return cast("T", entry[1])
        if entry is not None:
            self._entries.clear()  # something changed: every entry is as old
        value = await load()
        if version is not None and value is not None:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (version, value)
        return value

    def close(self) -> None:
        self._entries.clear()
        if self._probe is not None:
            probe, self._probe = self._probe, None
            probe.close()
