"""Per-tenant long-term memory for the `memory` tool: SQLite FTS5 in its own file.

The tables live in `<data_dir>/memory.sqlite3` (not the main database): memory is the one
piece of tool state that grows with use and is searched by text, and keeping it apart
means the store's migrations never have to know about it. Every query is scoped by tenant.
A search string from a model is never handed to FTS5's query language as-is: it is split
into words and each word is quoted, so no input can be a syntax error or an operator.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from runtime.errors import InvalidInput, NotFound
from runtime.tools.sqlite_file import SqliteFile

MAX_CONTENT_CHARS = 16 * 1024
MAX_MEMORIES_PER_TENANT = 10_000
MAX_SECTION_BYTES = 4 * 1024
_WORD = re.compile(r"\w+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_tenant ON memories(tenant, id);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, tags, content='memories', content_rowid='id', tokenize='unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags)
    VALUES ('delete', old.id, old.content, old.tags);
END;
CREATE TABLE IF NOT EXISTS memory_sections (
    tenant TEXT NOT NULL,
    scope TEXT NOT NULL,
    section TEXT NOT NULL,
    content TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, scope, section)
);
"""


def fts_query(text: str, max_terms: int = 32) -> str | None:
    """Words of `text`, each quoted, OR-ed; None when there are no words."""
    words = _WORD.findall(text)[:max_terms]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class MemoryStore(SqliteFile):
    """save / search / forget, scoped by tenant; and the sections every prompt carries
    (`set_section`, `sections`: one text per scope and name, e.g. `token:<id>`'s
    `user_profile`, `session:<id>`'s `project`). `open()` before use, `close()` at shutdown."""

    SCHEMA = _SCHEMA

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> MemoryStore:
        return cls(Path(data_dir) / "memory.sqlite3")

    async def save(self, tenant: str, content: str, tags: list[str] | None = None) -> int:
        content = content.strip()
        if not content:
            raise InvalidInput("memory content is empty")
        if len(content) > MAX_CONTENT_CHARS:
            raise InvalidInput(f"memory content is longer than {MAX_CONTENT_CHARS} characters")
        tag_text = " ".join(t.strip() for t in (tags or []) if t.strip())[:500]
        db = await self._conn()
        async with db.execute("SELECT COUNT(*) FROM memories WHERE tenant = ?", (tenant,)) as cur:
            row = await cur.fetchone()
        if row is not None and row[0] >= MAX_MEMORIES_PER_TENANT:
            raise InvalidInput(
                f"memory is full ({MAX_MEMORIES_PER_TENANT} entries); forget some first"
            )
        cur = await db.execute(
            "INSERT INTO memories (tenant, content, tags, created_at) VALUES (?, ?, ?, ?)",
            (tenant, content, tag_text, time.time()),
        )
        await db.commit()
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    async def search(self, tenant: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Best matches first (bm25); an empty query lists the most recent memories."""
        db = await self._conn()
        match = fts_query(query)
        if match is None:
            sql = (
                "SELECT id, content, tags, created_at FROM memories WHERE tenant = ? "
                "ORDER BY id DESC LIMIT ?"
            )
            params: tuple[Any, ...] = (tenant, limit)
        else:
            sql = (
                "SELECT m.id, m.content, m.tags, m.created_at FROM memories_fts f "
                "JOIN memories m ON m.id = f.rowid "
                "WHERE memories_fts MATCH ? AND m.tenant = ? "
                "ORDER BY bm25(memories_fts), m.id DESC LIMIT ?"
            )
            params = (match, tenant, limit)
        async with db.execute(sql, params) as cur:
            rows = await cur.fetchall()
        return [
            {"id": r[0], "content": r[1], "tags": r[2].split() if r[2] else [], "created_at": r[3]}
            for r in rows
        ]

    async def forget(self, tenant: str, memory_id: int) -> None:
        db = await self._conn()
        cur = await db.execute(
            "DELETE FROM memories WHERE id = ? AND tenant = ?", (memory_id, tenant)
        )
        await db.commit()
        if cur.rowcount == 0:
            raise NotFound(f"no memory with id {memory_id}")

    async def count(self, tenant: str) -> int:
        db = await self._conn()
        async with db.execute("SELECT COUNT(*) FROM memories WHERE tenant = ?", (tenant,)) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def set_section(self, tenant: str, scope: str, section: str, content: str) -> None:
        """Replace a section's text (empty: remove it); at most `MAX_SECTION_BYTES`."""
        content = content.strip()
        if len(content.encode()) > MAX_SECTION_BYTES:
            raise InvalidInput(f"a memory section holds at most {MAX_SECTION_BYTES} bytes")
        db = await self._conn()
        if content:
            await db.execute(
                "INSERT INTO memory_sections (tenant, scope, section, content, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, scope, section) DO UPDATE SET "
                "content = excluded.content, updated_at = excluded.updated_at",
                (tenant, scope, section, content, time.time()))
        else:
            await db.execute("DELETE FROM memory_sections WHERE tenant = ? AND scope = ? AND "
                             "section = ?", (tenant, scope, section))
        await db.commit()

    async def sections(self, tenant: str, scopes: dict[str, str]) -> dict[str, str]:
        """`{section: text}` for each `section -> scope` asked (absent when empty)."""
        db = await self._conn()
        out: dict[str, str] = {}
        for section, scope in scopes.items():
            async with db.execute(
                    "SELECT content FROM memory_sections WHERE tenant = ? AND scope = ? AND "
                    "section = ?", (tenant, scope, section)) as cur:
                row = await cur.fetchone()
            if row is not None:
                out[section] = str(row[0])
        return out

    async def drop_scope(self, tenant: str, scope: str) -> None:
        """Remove every section of a scope (a deleted session's `project`)."""
        db = await self._conn()
        await db.execute("DELETE FROM memory_sections WHERE tenant = ? AND scope = ?",
                         (tenant, scope))
        await db.commit()
