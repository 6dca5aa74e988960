"""Links to session files that work without a bearer token (`share_file`, `content_publish`).

A link is `/v1/shared/{token}` (a download) or `/v1/published/{token}` (an inline view in
the chat); the token carries 256 random bits and only its SHA-256 is stored, like API
tokens. A row names tenant, session and path: the file itself is read when the link is
used, through the session's workspace. A share expires (default `DEFAULT_EXPIRES_S`, at most
`MAX_EXPIRES_S`); a published view lives as long as its session; both can be revoked, and
the rows go with their session (`ON DELETE CASCADE`).
"""

from __future__ import annotations

import secrets
import time
from typing import Literal

from pydantic import BaseModel

from runtime.store.store import Store
from runtime.store.tokens import hash_token

ShareKind = Literal["share", "publish"]
DEFAULT_EXPIRES_S = 24 * 3600
MAX_EXPIRES_S = 7 * 24 * 3600
SHARE_PREFIX = "sh_"
_COLUMNS = "id, tenant_id, session_id, kind, path, created_at, expires_at, revoked_at, downloads"


class ShareRecord(BaseModel):
    id: str
    tenant_id: str
    session_id: str
    kind: ShareKind
    path: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    downloads: int

    def live(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class ShareStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, tenant_id: str, session_id: str, kind: ShareKind, path: str,
                     expires_at: float | None) -> tuple[str, ShareRecord]:
        """(the token, shown once; the row)."""
        token = secrets.token_urlsafe(32)
        record = ShareRecord(id=SHARE_PREFIX + secrets.token_hex(8), tenant_id=tenant_id,
                             session_id=session_id, kind=kind, path=path,
                             created_at=time.time(), expires_at=expires_at, revoked_at=None,
                             downloads=0)
        await self.store.connection.execute(
            "INSERT INTO shares (id, tenant_id, session_id, kind, path, token_hash, created_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (record.id, tenant_id, session_id, kind, path, hash_token(token),
             record.created_at, expires_at))
        return token, record

    async def live_count(self, tenant_id: str) -> int:
        async with self.store.connection.execute(
            "SELECT COUNT(*) FROM shares WHERE tenant_id = ? AND revoked_at IS NULL "
            "AND (expires_at IS NULL OR expires_at > ?)", (tenant_id, time.time())) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def by_token(self, token: str, kind: ShareKind) -> ShareRecord | None:
        """The live link of `kind` behind `token`, or None (unknown, expired, revoked)."""
        if not token or len(token) > 128:
            return None
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM shares WHERE token_hash = ? AND kind = ?",
            (hash_token(token), kind)) as cur:
            row = await cur.fetchone()
        record = ShareRecord(**dict(row)) if row else None
        return record if record is not None and record.live(time.time()) else None

    async def count_download(self, share_id: str) -> None:
        await self.store.connection.execute(
            "UPDATE shares SET downloads = downloads + 1 WHERE id = ?", (share_id,))

    async def list(self, tenant_id: str, session_id: str) -> list[ShareRecord]:
        """The session's live links, newest first."""
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM shares WHERE tenant_id = ? AND session_id = ? "
            "ORDER BY created_at DESC", (tenant_id, session_id)) as cur:
            rows = await cur.fetchall()
        now = time.time()
        return [r for r in (ShareRecord(**dict(row)) for row in rows) if r.live(now)]

    async def get(self, tenant_id: str, session_id: str, share_id: str) -> ShareRecord | None:
        async with self.store.connection.execute(
            f"SELECT {_COLUMNS} FROM shares WHERE tenant_id = ? AND session_id = ? AND id = ?",
            (tenant_id, session_id, share_id)) as cur:
            row = await cur.fetchone()
        record = ShareRecord(**dict(row)) if row else None
        return record if record is not None and record.live(time.time()) else None

    async def revoke(self, share_id: str) -> None:
        await self.store.connection.execute(
            "UPDATE shares SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (time.time(), share_id))
