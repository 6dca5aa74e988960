"""The audit database's schema, and the reads ``AuditLog`` makes through its own connection.

Writes never go through here: ``runtime.audit.writer`` owns them, on its own connection and
thread. This connection reads (``records``, recovery's open intents) and, at open, creates
the tables and proves the file is writable (a read-only store fails at open, not at the
first intent).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from pathlib import Path

import aiosqlite

from runtime.audit.records import AuditRecord
from runtime.errors import AuditUnavailable

__all__ = ["SCHEMA", "SCHEMA_VERSION", "last_checkpoint_seq", "open_reader", "select_records"]
SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL, tenant TEXT,
    session TEXT, exec_id TEXT, tool TEXT, instance TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_tenant ON audit (tenant, seq);
CREATE INDEX IF NOT EXISTS audit_exec ON audit (exec_id);
CREATE INDEX IF NOT EXISTS audit_session ON audit (session, seq);
CREATE INDEX IF NOT EXISTS audit_kind ON audit (kind, seq);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL, hash TEXT NOT NULL,
    ts TEXT NOT NULL, key_id TEXT NOT NULL, signature TEXT NOT NULL
);
"""


async def open_reader(db_path: Path) -> aiosqlite.Connection:
    """Create (0600) or open the database in WAL mode, with the schema in place.
    Raises ``OSError``/``sqlite3.Error``; the connection is closed again if set-up fails."""
    if not db_path.exists():  # private from the start; -wal/-shm inherit the mode
        os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    db = await aiosqlite.connect(db_path, isolation_level=None, timeout=30)
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=FULL")
        await db.execute("PRAGMA busy_timeout=30000")
        await db.executescript(SCHEMA)
        await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a real write: RO fails
    except BaseException:
        with suppress(sqlite3.Error):
            await db.close()
        raise
    return db


async def last_checkpoint_seq(db: aiosqlite.Connection) -> int:
    async with db.execute("SELECT seq FROM checkpoints ORDER BY id DESC LIMIT 1") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def select_records(
    db: aiosqlite.Connection, *, limit: int, **filters: str | int | None,
) -> list[AuditRecord]:
    """``AuditLog.records``' query: filters as there, in seq order, at most ``limit``."""
    where, params = _filters(**filters)
    sql = f"SELECT body FROM audit {where} ORDER BY seq LIMIT ?"
    try:
        async with db.execute(sql, (*params, max(0, limit))) as cur:
            return [AuditRecord.from_body(r[0]) for r in await cur.fetchall()]
    except sqlite3.Error as exc:
        raise AuditUnavailable(f"audit store unreadable: {exc}") from None


def _filters(**kw: object) -> tuple[str, list[object]]:
    clauses, params = [], []
    for name in ("tenant", "session", "tool", "exec_id", "kind"):
        if kw.get(name) is not None:
            clauses.append(f"{name} = ?")
            params.append(kw[name])
    if kw.get("action") is not None:
        clauses.append("COALESCE(json_extract(body, '$.action'), 'exec') = ?")
        params.append(kw["action"])
    if kw.get("since_seq") is not None:
        clauses.append("seq > ?")
        params.append(kw["since_seq"])
    if kw.get("since_ts") is not None:
        clauses.append("ts >= ?")
        params.append(kw["since_ts"])
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
