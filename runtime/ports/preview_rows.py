"""Preview links on disk (the ``preview_links`` table): a restart finds them again.

A row holds what a link is (tenant, session, port, the process it serves, the token that
made it, its expiry), never its secret: the secret is derived from the link's id with the
server's preview key (``runtime.ports.previews.label_of``), so the database alone opens
nothing. Revoked and expired links are deleted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path
from typing import Any

from runtime.store.store import Store

KEY_FILE = "preview.key"
KEY_BYTES = 32
_COLUMNS = "id, tenant_id, session_id, port, process_id, token_id, created_at, expires_at"


def preview_key(root: Path) -> bytes:
    """The server's preview key (``<root>/preview.key``, 0600, made once)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
    key = secrets.token_bytes(KEY_BYTES)
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)
    return key


class PreviewRows:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def insert(self, row: dict[str, Any]) -> None:
        await self.store.connection.execute(
            f"INSERT INTO preview_links ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (row["id"], row["tenant_id"], row["session_id"], row["port"], row["process_id"],
             row["token_id"], row["created_at"], row["expires_at"]))

    async def delete(self, link_ids: list[str]) -> None:
        if not link_ids:
            return
        await self.store.connection.executemany(
            "DELETE FROM preview_links WHERE id = ?", [(i,) for i in link_ids])

    async def live(self, now: float | None = None) -> list[dict[str, Any]]:
        """The unexpired rows (the expired ones are deleted)."""
        now = time.time() if now is None else now
        await self.store.connection.execute(
            "DELETE FROM preview_links WHERE expires_at <= ?", (now,))
        async with self.store.connection.execute(
                f"SELECT {_COLUMNS} FROM preview_links ORDER BY created_at") as cursor:
            return [dict(row) for row in await cursor.fetchall()]
