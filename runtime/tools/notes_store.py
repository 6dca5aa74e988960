"""Per-session working notes of the agent: the `todo` list and the `scratchpad` (one default
note and named ones).

Kept in `<data_dir>/notes.sqlite3` so a plan survives a supervisor restart. Every row is
keyed by (tenant, session); nothing here can reach another session's notes. A sub-agent's
notes are its own: keyed by `owner_key(session, agent_id)` (`<session>/<agent id>`), which
only that sub-agent's calls use; they go when it ends (`drop_agent`). The session's plan-mode
state is here too (`plan_state`, `set_plan_state`), so a restart does not leave plan mode.
The API calls `drop_session` when a session is deleted: it drops its sub-agents' notes too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from runtime.errors import InvalidInput, NotFound
from runtime.tools.sqlite_file import SqliteFile

TodoStatus = Literal["pending", "in_progress", "done", "failed", "skipped"]
MAX_TODOS = 200
MAX_TODO_CHARS = 500
MAX_SCRATCHPAD_CHARS = 64 * 1024
MAX_NOTES = 50
NOTE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS todos (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    id INTEGER NOT NULL,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session, id)
);
CREATE TABLE IF NOT EXISTS scratchpads (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    content TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session)
);
CREATE TABLE IF NOT EXISTS plan_modes (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    active INTEGER NOT NULL,
    plan TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session)
);
CREATE TABLE IF NOT EXISTS notes (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    name TEXT NOT NULL,
    content TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session, name)
);
"""


_TABLES = ("notes", "todos", "scratchpads")


def owner_key(session: str, agent_id: str | None) -> str:
    """Whose notes: the session's, or one sub-agent's of it (never another session's)."""
    return session if agent_id is None else f"{session}/{agent_id}"


class NotesStore(SqliteFile):
    """Todo items and one scratchpad per (tenant, session)."""

    SCHEMA = _SCHEMA

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> NotesStore:
        return cls(Path(data_dir) / "notes.sqlite3")

    # ---- todo ------------------------------------------------------------------------

    async def todos(self, tenant_id: str, session: str) -> list[dict[str, Any]]:
        db = await self._conn()
        async with db.execute(
            "SELECT id, title, status FROM todos WHERE tenant = ? AND session = ? ORDER BY id",
            (tenant_id, session),
        ) as cur:
            rows = await cur.fetchall()
        return [{"id": r[0], "title": r[1], "status": r[2]} for r in rows]

    async def add_todo(
        self, tenant_id: str, session: str, title: str, status: TodoStatus = "pending"
    ) -> int:
        title = _check_title(title)
        db = await self._conn()
        async with db.execute(
            "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM todos WHERE tenant = ? AND session = ?",
            (tenant_id, session),
        ) as cur:
            row = await cur.fetchone()
        count, last = (row[0], row[1]) if row else (0, 0)
        if count >= MAX_TODOS:
            raise InvalidInput(f"the todo list is full ({MAX_TODOS} items)")
        new_id = int(last) + 1
        await db.execute(
            "INSERT INTO todos (tenant, session, id, title, status, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (tenant_id, session, new_id, title, status, time.time()),
        )
        await db.commit()
        return new_id

    async def update_todo(
        self,
        tenant_id: str,
        session: str,
        item_id: int,
        *,
        status: TodoStatus | None = None,
        title: str | None = None,
    ) -> None:
        sets: list[str] = []
        values: list[object] = []
        if status is not None:
            sets.append("status = ?")
            values.append(status)
        if title is not None:
            sets.append("title = ?")
            values.append(_check_title(title))
        if not sets:
            raise InvalidInput("todo update needs a status or a title")
        db = await self._conn()
        cur = await db.execute(
            f"UPDATE todos SET {', '.join(sets)}, updated_at = ? "
            "WHERE tenant = ? AND session = ? AND id = ?",
            (*values, time.time(), tenant_id, session, item_id),
        )
        await db.commit()
        if cur.rowcount == 0:
            raise NotFound(f"no todo item {item_id}")

    async def remove_todo(self, tenant_id: str, session: str, item_id: int) -> None:
        db = await self._conn()
        cur = await db.execute(
            "DELETE FROM todos WHERE tenant = ? AND session = ? AND id = ?",
            (tenant_id, session, item_id),
        )
        await db.commit()
        if cur.rowcount == 0:
            raise NotFound(f"no todo item {item_id}")

    async def set_todos(self, tenant_id: str, session: str,
                        items: list[tuple[str, TodoStatus]]) -> None:
        """Replace the whole list (ids from 1, in order) in one transaction."""
        if len(items) > MAX_TODOS:
            raise InvalidInput(f"the todo list holds at most {MAX_TODOS} items")
        rows = [(tenant_id, session, i, _check_title(title), status, time.time())
                for i, (title, status) in enumerate(items, 1)]
        db = await self._conn()
        await db.execute("DELETE FROM todos WHERE tenant = ? AND session = ?", (tenant_id, session))
        await db.executemany(
            "INSERT INTO todos (tenant, session, id, title, status, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)", rows)
        await db.commit()

    async def clear_todos(self, tenant_id: str, session: str) -> None:
        db = await self._conn()
        await db.execute("DELETE FROM todos WHERE tenant = ? AND session = ?", (tenant_id, session))
        await db.commit()

    # ---- scratchpad --------------------------------------------------------------------

    async def scratchpad(self, tenant_id: str, session: str) -> str:
        db = await self._conn()
        async with db.execute(
            "SELECT content FROM scratchpads WHERE tenant = ? AND session = ?", (tenant_id, session)
        ) as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else ""

    async def set_scratchpad(self, tenant_id: str, session: str, content: str) -> None:
        if len(content) > MAX_SCRATCHPAD_CHARS:
            raise InvalidInput(f"the scratchpad holds at most {MAX_SCRATCHPAD_CHARS} characters")
        db = await self._conn()
        await db.execute(
            "INSERT INTO scratchpads (tenant, session, content, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, session) DO UPDATE SET content = excluded.content, "
            "updated_at = excluded.updated_at",
            (tenant_id, session, content, time.time()),
        )
        await db.commit()

    async def note(self, tenant_id: str, session: str, name: str) -> str | None:
        db = await self._conn()
        async with db.execute(
            "SELECT content FROM notes WHERE tenant = ? AND session = ? AND name = ?",
            (tenant_id, session, name),
        ) as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else None

    async def set_note(self, tenant_id: str, session: str, name: str, content: str) -> None:
        """Create or replace note `name`; an empty content deletes it."""
        if len(content) > MAX_SCRATCHPAD_CHARS:
            raise InvalidInput(f"a note holds at most {MAX_SCRATCHPAD_CHARS} characters")
        db = await self._conn()
        if not content:
            await db.execute("DELETE FROM notes WHERE tenant = ? AND session = ? AND name = ?",
                             (tenant_id, session, name))
            await db.commit()
            return
        async with db.execute(
            "SELECT COUNT(*) FROM notes WHERE tenant = ? AND session = ? AND name != ?",
            (tenant_id, session, name),
        ) as cur:
            row = await cur.fetchone()
        if row and row[0] >= MAX_NOTES:
            raise InvalidInput(f"a session keeps at most {MAX_NOTES} named notes; clear one")
        await db.execute(
            "INSERT INTO notes (tenant, session, name, content, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, session, name) DO UPDATE SET "
            "content = excluded.content, updated_at = excluded.updated_at",
            (tenant_id, session, name, content, time.time()),
        )
        await db.commit()

    async def notes(self, tenant_id: str, session: str) -> list[tuple[str, int]]:
        """(name, characters) of the session's named notes, by name."""
        db = await self._conn()
        async with db.execute(
            "SELECT name, length(content) FROM notes WHERE tenant = ? AND session = ? "
            "ORDER BY name", (tenant_id, session),
        ) as cur:
            rows = await cur.fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    async def drop_agent(self, tenant_id: str, session: str, agent_id: str) -> None:
        """A sub-agent ended: its own todo and notes go."""
        db = await self._conn()
        for table in _TABLES:
            await db.execute(f"DELETE FROM {table} WHERE tenant = ? AND session = ?",
                             (tenant_id, owner_key(session, agent_id)))
        await db.commit()

    async def drop_session(self, tenant_id: str, session: str) -> None:
        db = await self._conn()
        for table in (*_TABLES, "plan_modes"):  # the session's and its sub-agents' rows
            await db.execute(
                f"DELETE FROM {table} WHERE tenant = ? AND (session = ? OR "
                "substr(session, 1, ?) = ?)", (tenant_id, session, len(session) + 1,
                                               session + "/"))
        await db.commit()

    # ---- plan mode (`runtime.policy.plan_mode.PlanStore`) ----------------------------------

    async def plan_state(self, tenant_id: str, session: str) -> tuple[bool, str | None]:
        db = await self._conn()
        async with db.execute(
            "SELECT active, plan FROM plan_modes WHERE tenant = ? AND session = ?",
            (tenant_id, session),
        ) as cur:
            row = await cur.fetchone()
        return (bool(row[0]), row[1]) if row else (False, None)

    async def set_plan_state(self, tenant_id: str, session: str, active: bool,
                             plan: str | None) -> None:
        db = await self._conn()
        await db.execute(
            "INSERT INTO plan_modes (tenant, session, active, plan, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, session) DO UPDATE SET "
            "active = excluded.active, plan = excluded.plan, updated_at = excluded.updated_at",
            (tenant_id, session, int(active), plan, time.time()))
        await db.commit()


def _check_title(title: str) -> str:
    title = " ".join(title.split())
    if not title:
        raise InvalidInput("todo title is empty")
    if len(title) > MAX_TODO_CHARS:
        raise InvalidInput(f"todo title is longer than {MAX_TODO_CHARS} characters")
    return title
