"""The `processes` table: one row per background process, kept while its session lives.

A row is written before its container is created (state ``running``, no container yet),
gets its container id once created, and is closed (``exited`` with exit code and reason)
when the process ends. A restarted supervisor reads the rows still ``running`` to adopt or
close them. Rows go with their session (``ON DELETE CASCADE``); of a session's ended rows
only the newest ``KEEP_ENDED`` are kept.
"""

from __future__ import annotations

import json
import time
from typing import Any

from runtime.processes.models import ProcessRecord
from runtime.store.store import Store

KEEP_ENDED = 100
_COLUMNS = ("id, tenant_id, session_id, name, command, cwd, state, exit_code, reason, "
            "started_at, ended_at, ports, node, runtime, kind, container, token_id, "
            "token_expires_at, egress, output_bytes")


def _record(row: Any) -> ProcessRecord:
    values = dict(row)
    values["ports"] = json.loads(values["ports"] or "[]")
    values.pop("egress", None)
    return ProcessRecord(**values)


class ProcessStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def db(self) -> Any:
        return self.store.connection

    async def insert(self, record: ProcessRecord, *, egress: bool) -> None:
        await self.db.execute(
            f"INSERT INTO processes ({_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (record.id, record.tenant_id, record.session_id, record.name, record.command,
             record.cwd, record.state, record.exit_code, record.reason, record.started_at,
             record.ended_at, json.dumps(record.ports), record.node, record.runtime,
             record.kind, record.container, record.token_id, record.token_expires_at,
             int(egress), record.output_bytes))

    async def set_container(self, process_id: str, container: str) -> None:
        await self.db.execute("UPDATE processes SET container = ? WHERE id = ?",
                              (container, process_id))

    async def close(self, process_id: str, *, exit_code: int | None, reason: str,
                    output_bytes: int) -> ProcessRecord | None:
        """Mark the row ended (once: a second close changes nothing); the row after."""
        await self.db.execute(
            "UPDATE processes SET state = 'exited', exit_code = ?, reason = ?, ended_at = ?, "
            "output_bytes = ? WHERE id = ? AND state = 'running'",
            (exit_code, reason, time.time(), output_bytes, process_id))
        record = await self.get_any(process_id)
        if record is not None:
            await self._prune(record.session_id)
        return record

    async def _prune(self, session_id: str) -> list[str]:
        async with self.db.execute(
                "SELECT id FROM processes WHERE session_id = ? AND state = 'exited' "
                "ORDER BY ended_at DESC, id DESC LIMIT -1 OFFSET ?",
                (session_id, KEEP_ENDED)) as cur:
            gone = [row[0] for row in await cur.fetchall()]
        for process_id in gone:
            await self.db.execute("DELETE FROM processes WHERE id = ?", (process_id,))
        return gone

    async def get(self, tenant_id: str, session_id: str, process_id: str
                  ) -> ProcessRecord | None:
        async with self.db.execute(
                f"SELECT {_COLUMNS} FROM processes WHERE tenant_id = ? AND session_id = ? "
                "AND id = ?", (tenant_id, session_id, process_id)) as cur:
            row = await cur.fetchone()
        return _record(row) if row else None

    async def get_any(self, process_id: str) -> ProcessRecord | None:
        async with self.db.execute(f"SELECT {_COLUMNS} FROM processes WHERE id = ?",
                                   (process_id,)) as cur:
            row = await cur.fetchone()
        return _record(row) if row else None

    async def for_session(self, tenant_id: str, session_id: str, kind: str = "command"
                          ) -> list[ProcessRecord]:
        """The session's processes of ``kind`` (sub-agents keep theirs here too), oldest
        first."""
        async with self.db.execute(
                f"SELECT {_COLUMNS} FROM processes WHERE tenant_id = ? AND session_id = ? "
                "AND kind = ? ORDER BY started_at, id", (tenant_id, session_id, kind)) as cur:
            return [_record(row) for row in await cur.fetchall()]

    async def running(self, kind: str = "command") -> list[tuple[ProcessRecord, bool]]:
        """Every row of ``kind`` still running (after a restart: to adopt or close), with
        its egress."""
        async with self.db.execute(
                f"SELECT {_COLUMNS} FROM processes WHERE state = 'running' AND kind = ? "
                "ORDER BY started_at", (kind,)) as cur:
            rows = await cur.fetchall()
        return [(_record(row), bool(row["egress"])) for row in rows]

    async def ids(self) -> set[str]:
        async with self.db.execute("SELECT id FROM processes") as cur:
            return {row[0] for row in await cur.fetchall()}
