"""E2B's integer pids onto Navi's `p_...` process ids, per sandbox, kept in the store.

The SDK names a command by the pid `Start` gave it (or by its tag); a row of `e2b_pids`
(migration 10) holds the pid, the process id, the tag and the command's config as the SDK
sent it (for `commands.list()`), so `Sandbox.connect(...)` after a server restart still
lists, connects to, feeds and kills the commands the restarted server adopted. Pids count
up from 1001 per sandbox; rows go with the sandbox (`ON DELETE CASCADE`), the rows of
ended commands are dropped when the sandbox's commands are listed (envd forgets an exited
process too), and at most `KEEP_PIDS` are kept per sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiosqlite
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof

from runtime.e2b.vendor.envd import process_pb as pb
from runtime.store import Store

FIRST_PID = 1001
MAX_TAG = 256
KEEP_PIDS = 10_000
"""A sandbox keeps the rows of its newest 10,000 commands (older pids are not found)."""


@dataclass
class Started:
    process_id: str
    config: pb.ProcessConfig
    tag: str | None


def _started(row: Any) -> tuple[int, Started]:
    pid, process_id, tag, config = tuple(row)
    return int(pid), Started(str(process_id), pb.ProcessConfig.from_json(config),
                             None if tag is None else str(tag))


class PidTable:
    """E2B pid <-> Navi process id, per sandbox (`e2b_pids`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def _db(self) -> aiosqlite.Connection:
        return self.store.connection

    async def add(self, session: str, started: Started) -> int:
        """The next pid of the sandbox, now naming `started` (one statement: no two
        commands get the same pid)."""
        async with self._db.execute(
                "INSERT INTO e2b_pids (session_id, pid, process_id, tag, config) "
                "SELECT ?, COALESCE(MAX(pid) + 1, ?), ?, ?, ? FROM e2b_pids "
                "WHERE session_id = ? RETURNING pid",
                (session, FIRST_PID, started.process_id, started.tag,
                 started.config.to_json(), session)) as cur:
            row = await cur.fetchone()
        assert row is not None
        pid = int(row[0])
        if pid % 1000 == 0:  # now and then: the oldest rows past the bound go
            await self._db.execute("DELETE FROM e2b_pids WHERE session_id = ? AND pid <= ?",
                                   (session, pid - KEEP_PIDS))
        return pid

    async def find(self, session: str, selector: pb.ProcessSelector | None
                   ) -> tuple[int, Started]:
        """The command a selector names (NOT_FOUND / INVALID_ARGUMENT as Connect errors)."""
        columns = "pid, process_id, tag, config"
        match selector.selector if selector is not None else None:
            case Oneof(field="pid", value=value):
                pid = int(value)
                async with self._db.execute(
                        f"SELECT {columns} FROM e2b_pids WHERE session_id = ? AND pid = ?",
                        (session, pid)) as cur:
                    row = await cur.fetchone()
                if row is not None:
                    return _started(row)
                raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
            case Oneof(field="tag", value=tag):
                tag = str(tag)[:MAX_TAG]
                async with self._db.execute(
                        f"SELECT {columns} FROM e2b_pids WHERE session_id = ? AND tag = ? "
                        "ORDER BY pid DESC LIMIT 1", (session, tag)) as cur:
                    row = await cur.fetchone()
                if row is not None:
                    return _started(row)
                raise ConnectError(Code.NOT_FOUND, f"process with tag {tag!r} not found")
        raise ConnectError(Code.INVALID_ARGUMENT, "a process pid or tag is required")

    async def of_sandbox(self, session: str) -> dict[int, Started]:
        async with self._db.execute(
                "SELECT pid, process_id, tag, config FROM e2b_pids WHERE session_id = ? "
                "ORDER BY pid", (session,)) as cur:
            rows = await cur.fetchall()
        return dict(_started(r) for r in rows)

    async def forget(self, session: str, pids: Iterable[int]) -> None:
        await self._db.executemany(
            "DELETE FROM e2b_pids WHERE session_id = ? AND pid = ?",
            [(session, pid) for pid in pids])
