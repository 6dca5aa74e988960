"""What Navi keeps about E2B sandboxes: which sessions were made through `/e2b`, their
template, metadata, env vars and deadline, the per-sandbox access tokens, and the code
interpreter's contexts (each a kernel of the session; `runtime.e2b.pids` keeps the pids).

A sandbox is a Navi session; its row goes with the session (`ON DELETE CASCADE`), so a
session deleted through `/v1` stops being a sandbox too. Access tokens (the SDK's
`envdAccessToken` and `trafficAccessToken`) carry 256 random bits; only their SHA-256 is
stored, with the API key that got them: sandbox-side calls act as that key and stop
working when it is revoked or expires (checked on every call). A token outlives its sandbox
for a day, so its holder learns "not running" (E2B's 502) rather than "unauthorized".
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Literal

import aiosqlite
from pydantic import BaseModel

from runtime.store import Store
from runtime.store.tokens import hash_token

TokenKind = Literal["envd", "traffic"]
ORPHAN_KEEP_S = 24 * 3600
_COLUMNS = "session_id, tenant_id, template, metadata, envs, started_at, end_at"
MAX_TOKEN_LEN = 128


class SandboxRecord(BaseModel):
    session_id: str
    tenant_id: str
    template: str
    metadata: dict[str, str]
    envs: dict[str, str]
    started_at: float
    end_at: float


class TokenGrant(BaseModel):
    """What a presented access token stands for."""

    session_id: str
    key_id: str
    kind: TokenKind


def _record(row: object) -> SandboxRecord:
    fields = dict(row)  # type: ignore[call-overload]
    fields["metadata"] = json.loads(fields["metadata"])
    fields["envs"] = json.loads(fields["envs"])
    return SandboxRecord(**fields)


class SandboxStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def _db(self) -> aiosqlite.Connection:
        return self.store.connection

    async def create(self, record: SandboxRecord) -> None:
        await self._db.execute(
            f"INSERT INTO e2b_sandboxes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (record.session_id, record.tenant_id, record.template,
             json.dumps(record.metadata), json.dumps(record.envs), record.started_at,
             record.end_at))

    async def get(self, tenant_id: str, session_id: str) -> SandboxRecord | None:
        """The sandbox if it is the tenant's (another tenant's is None, like a missing one)."""
        if len(session_id) > 64:
            return None
        async with self._db.execute(
                f"SELECT {_COLUMNS} FROM e2b_sandboxes WHERE session_id = ? AND tenant_id = ?",
                (session_id, tenant_id)) as cur:
            row = await cur.fetchone()
        return _record(row) if row else None

    async def of_tenant(self, tenant_id: str) -> list[SandboxRecord]:
        async with self._db.execute(
                f"SELECT {_COLUMNS} FROM e2b_sandboxes WHERE tenant_id = ? "
                "ORDER BY started_at, session_id", (tenant_id,)) as cur:
            rows = await cur.fetchall()
        return [_record(r) for r in rows]

    async def expired(self, now: float) -> list[SandboxRecord]:
        async with self._db.execute(
                f"SELECT {_COLUMNS} FROM e2b_sandboxes WHERE end_at <= ? ORDER BY end_at",
                (now,)) as cur:
            rows = await cur.fetchall()
        return [_record(r) for r in rows]

    async def set_end(self, session_id: str, end_at: float) -> None:
        await self._db.execute("UPDATE e2b_sandboxes SET end_at = ? WHERE session_id = ?",
                               (end_at, session_id))

    async def issue(self, session_id: str, key_id: str, kind: TokenKind) -> str:
        """A new access token for the sandbox, bound to the API key `key_id` (shown once)."""
        token = secrets.token_urlsafe(32)
        await self._db.execute(
            "INSERT INTO e2b_tokens (token_hash, session_id, key_id, kind, created_at) "
            "VALUES (?, ?, ?, ?, ?)", (hash_token(token), session_id, key_id, kind,
                                       time.time()))
        return token

    async def grant(self, token: str) -> TokenGrant | None:
        if not token or len(token) > MAX_TOKEN_LEN:
            return None
        async with self._db.execute(
                "SELECT session_id, key_id, kind FROM e2b_tokens WHERE token_hash = ?",
                (hash_token(token),)) as cur:
            row = await cur.fetchone()
        return TokenGrant(**dict(row)) if row else None

    async def forget_orphans(self, now: float) -> None:
        """Tokens of sandboxes gone for more than `ORPHAN_KEEP_S`."""
        await self._db.execute(
            "DELETE FROM e2b_tokens WHERE created_at < ? AND session_id NOT IN "
            "(SELECT session_id FROM e2b_sandboxes)", (now - ORPHAN_KEEP_S,))

    # -- the code interpreter's contexts (`e2b_contexts`, migration 10) -------------------

    async def add_context(self, session_id: str, context_id: str, kernel: str) -> None:
        await self._db.execute(
            "INSERT INTO e2b_contexts (session_id, context_id, kernel, created_at) "
            "VALUES (?, ?, ?, ?)", (session_id, context_id, kernel, time.time()))

    async def context_kernel(self, session_id: str, context_id: str) -> str | None:
        async with self._db.execute(
                "SELECT kernel FROM e2b_contexts WHERE session_id = ? AND context_id = ?",
                (session_id, context_id)) as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else None

    async def contexts(self, session_id: str) -> list[str]:
        """The sandbox's context ids, oldest first."""
        async with self._db.execute(
                "SELECT context_id FROM e2b_contexts WHERE session_id = ? "
                "ORDER BY created_at, context_id", (session_id,)) as cur:
            rows = await cur.fetchall()
        return [str(r[0]) for r in rows]

    async def count_contexts(self, session_id: str) -> int:
        async with self._db.execute(
                "SELECT COUNT(*) FROM e2b_contexts WHERE session_id = ?", (session_id,)) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def remove_context(self, session_id: str, context_id: str) -> None:
        await self._db.execute(
            "DELETE FROM e2b_contexts WHERE session_id = ? AND context_id = ?",
            (session_id, context_id))
