"""The runtime's database: tenants, bearer tokens and sessions in one SQLite file (WAL).

Tokens (``runtime.store.tokens``) are kept only as SHA-256 digests; the plaintext exists
once, in the return value of ``create_token``. Every session query is scoped by tenant:
another tenant's session is indistinguishable from one that does not exist.

One ``aiosqlite`` connection in autocommit mode; multi-statement changes use explicit
``BEGIN IMMEDIATE`` transactions. ``Store.connection`` is public for later tables (messages,
memory) that add their own migrations and queries.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from runtime.errors import ConfigError, Conflict, InvalidInput, NotFound
from runtime.hostusers import host_has_uid
from runtime.logging import get_logger
from runtime.store import ids
from runtime.store.migrations import apply_migrations
from runtime.store.models import (
    LOCAL_NODE,
    NAME_PATTERN,
    TITLE_MAX,
    SessionRecord,
    Tenant,
    TokenRecord,
)
from runtime.store.read_cache import ReadCache
from runtime.store.tokens import TOKEN_MAX_CHARS, Tokens, hash_token

log = get_logger(__name__)


BOOTSTRAP_MIN_CHARS = 16
ADMIN_TENANT = "admin"
_NAME_RE = re.compile(NAME_PATTERN.replace("$", r"\Z"))


def check_tenant_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput(
            "tenant name must be 1-64 characters: letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name


class Store:
    """Async access to ``navi.sqlite3``. Open with ``await Store.open(path)``; ``await close()``."""

    def __init__(self, connection: aiosqlite.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self._reads = ReadCache(path)  # tokens and sessions, while the file is unchanged
        self.tokens = Tokens(connection, self._reads)
        # the token calls, by name (``runtime.store.tokens``)
        self.operator_tenant = self.tokens.operator_tenant
        self.create_token = self.tokens.create_token
        self.authenticate = self.tokens.authenticate
        self.get_token = self.tokens.get_token
        self.list_tokens = self.tokens.list_tokens
        self.revoke_token = self.tokens.revoke_token

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> Store:
        """Open (creating if needed, mode 0600) the database at ``path`` and migrate it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Create the file ourselves so it (and SQLite's -wal/-shm, which copy its mode) is 0600.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        db = await aiosqlite.connect(path, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            await db.execute("PRAGMA busy_timeout = 5000")
            async with db.execute("PRAGMA journal_mode = WAL") as cur:
                mode = await cur.fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                log.warning("store_not_wal", journal_mode=mode[0] if mode else None)
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.execute("PRAGMA foreign_keys = ON")
            await apply_migrations(db)
        except BaseException:
            await db.close()
            raise
        return cls(db, path)

    async def close(self) -> None:
        self._reads.close()
        await self._db.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connection(self) -> aiosqlite.Connection:
        """The underlying connection (autocommit), for modules that add their own tables."""
        return self._db

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception)."""
        await self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            await self._db.execute("ROLLBACK")
            raise
        await self._db.execute("COMMIT")

    async def _one(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        # one hop to the connection's thread (a cursor's execute, fetch and close are three)
        return list(await self._db.execute_fetchall(sql, params))

    # -- tenants -----------------------------------------------------------------------------

    async def create_tenant(self, name: str, tenant_id: str | None = None) -> Tenant:
        """New tenant (its id may be chosen beforehand, for the audit); ``Conflict`` if the
        name (case-insensitive) is taken."""
        tenant = Tenant(id=tenant_id or ids.new_tenant_id(), name=check_tenant_name(name),
                        created_at=time.time())
        try:
            await self._db.execute(
                "INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)",
                (tenant.id, tenant.name, tenant.created_at),
            )
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"a tenant named {tenant.name!r} already exists") from exc
        log.info("tenant_created", tenant=tenant.id, name=tenant.name)
        return tenant

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        if not ids.is_tenant_id(tenant_id):
            return None
        row = await self._one("SELECT id, name, created_at FROM tenants WHERE id = ?",
                              (tenant_id,))
        return Tenant(**dict(row)) if row else None

    async def get_tenant_by_name(self, name: str) -> Tenant | None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            return None
        row = await self._one("SELECT id, name, created_at FROM tenants WHERE name = ?", (name,))
        return Tenant(**dict(row)) if row else None

    async def list_tenants(self) -> list[Tenant]:
        rows = await self._all("SELECT id, name, created_at FROM tenants ORDER BY created_at", ())
        return [Tenant(**dict(r)) for r in rows]

    async def tenant_sandbox_uid(self, tenant_id: str, base: int,
                                 passwd: Path | None = None) -> int:
        """The tenant's own sandbox uid, given on first use and kept: the lowest free uid
        from ``base`` up that no host account has (``passwd``: the host's passwd file when
        ours is a container's, see ``runtime.hostusers``). ``NotFound`` for no tenant."""
        row = await self._one("SELECT sandbox_uid FROM tenants WHERE id = ?", (tenant_id,))
        if row is None:
            raise NotFound("no such tenant")
        if row["sandbox_uid"] is not None:
            return int(row["sandbox_uid"])
        for _ in range(100):  # another process may take the same uid first: try the next
            top = await self._one("SELECT MAX(sandbox_uid) AS top FROM tenants", ())
            uid = max(base, int(top["top"]) + 1 if top and top["top"] is not None else base)
            while host_has_uid(uid, passwd):
                uid += 1
            try:
                await self._db.execute(
                    "UPDATE tenants SET sandbox_uid = ? WHERE id = ? AND sandbox_uid IS NULL",
                    (uid, tenant_id))
            except sqlite3.IntegrityError:
                continue
            row = await self._one("SELECT sandbox_uid FROM tenants WHERE id = ?", (tenant_id,))
            assert row is not None and row["sandbox_uid"] is not None
            log.info("tenant_sandbox_uid", tenant=tenant_id, uid=row["sandbox_uid"])
            return int(row["sandbox_uid"])
        raise Conflict("could not give the tenant a sandbox uid")

    # -- tokens (runtime.store.tokens) -------------------------------------------------------

    async def ensure_bootstrap_admin(self, plaintext: str) -> TokenRecord:
        """Idempotently: an admin token whose hash is that of ``plaintext``, in the operator
        tenant (the tenant of the first admin token; tenant ``admin``, made here, if none).

        A token already stored with that hash is returned as it is; if it was revoked it stays
        revoked (revocation wins over the environment), which is logged. A new bootstrap token
        revokes the previous bootstrap tokens, so rotating ``NAVI_ADMIN_TOKEN`` retires the old.
        """
        if not isinstance(plaintext, str) or not (
            BOOTSTRAP_MIN_CHARS <= len(plaintext) <= TOKEN_MAX_CHARS
        ):
            raise ConfigError(
                f"NAVI_ADMIN_TOKEN must be {BOOTSTRAP_MIN_CHARS}-{TOKEN_MAX_CHARS} characters"
            )
        async with self.transaction() as db:
            async with db.execute(
                "SELECT id, tenant_id, role, name, created_at, expires_at, revoked_at "
                "FROM tokens WHERE token_hash = ?",
                (hash_token(plaintext),),
            ) as cur:
                row = await cur.fetchone()
            if row is not None:
                record = TokenRecord(**dict(row))
                if record.revoked_at is not None:
                    log.warning("bootstrap_token_revoked", token_id=record.id)
                return record
            operator = await self.operator_tenant()
            async with db.execute("SELECT id FROM tenants WHERE name = ?", (ADMIN_TENANT,)) as c:
                tenant_row = await c.fetchone()
            if operator is not None:
                tenant_id = operator
            elif tenant_row is None:
                tenant_id = ids.new_tenant_id()
                await db.execute(
                    "INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)",
                    (tenant_id, ADMIN_TENANT, time.time()),
                )
            else:
                tenant_id = tenant_row["id"]
            await db.execute(
                "UPDATE tokens SET revoked_at = ? WHERE bootstrap = 1 AND revoked_at IS NULL",
                (time.time(),),
            )
            return await self.tokens.insert_token(tenant_id, "admin", "bootstrap", plaintext,
                                                  bootstrap=True)

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(
        self, tenant_id: str, profile: str, title: str | None = None,
        session_id: str | None = None, node: str = LOCAL_NODE,
    ) -> SessionRecord:
        """A new session (``session_id``: one made beforehand, e.g. to audit its creation) on
        ``node`` (its cluster node, kept for its life)."""
        if title is not None and (len(title) > TITLE_MAX or not title.isprintable()):
            raise InvalidInput(f"title must be printable text of at most {TITLE_MAX} characters")
        if not isinstance(profile, str) or not _NAME_RE.match(profile):
            raise InvalidInput("malformed profile name")
        if await self.get_tenant(tenant_id) is None:
            raise NotFound("no such tenant")
        if session_id is not None and not ids.is_session_id(session_id):
            raise InvalidInput("malformed session id")
        record = SessionRecord(id=session_id or ids.new_session_id(), tenant_id=tenant_id,
                               profile=profile,
                               title=title, created_at=time.time(), node=node)
        await self._db.execute(
            "INSERT INTO sessions (id, tenant_id, profile, title, created_at, node) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (record.id, tenant_id, profile, title, record.created_at, node),
        )
        log.info("session_created", tenant=tenant_id, session=record.id, profile=profile,
                 node=node)
        return record

    async def set_session_profile(self, tenant_id: str, session_id: str, profile: str) -> None:
        """Change a session's profile (the caller checked the policy and audited it)."""
        if not isinstance(profile, str) or not _NAME_RE.match(profile):
            raise InvalidInput("malformed profile name")
        cur = await self._db.execute(
            "UPDATE sessions SET profile = ? WHERE id = ? AND tenant_id = ?",
            (profile, session_id, tenant_id))
        if cur.rowcount == 0:
            raise NotFound("no such session")
        log.info("session_profile_set", tenant=tenant_id, session=session_id, profile=profile)

    async def set_session_title(self, tenant_id: str, session_id: str, title: str, *,
                                only_if_unset: bool = False) -> bool:
        """Name a session (``only_if_unset``: only one still untitled); False if unchanged."""
        if len(title) > TITLE_MAX or not title.isprintable():
            raise InvalidInput(f"title must be printable text of at most {TITLE_MAX} characters")
        unset = " AND title IS NULL" if only_if_unset else ""
        cur = await self._db.execute(
            f"UPDATE sessions SET title = ? WHERE id = ? AND tenant_id = ?{unset}",
            (title, session_id, tenant_id))
        return cur.rowcount > 0

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        """The session if it exists AND belongs to ``tenant_id``; otherwise ``None``."""
        if not ids.is_session_id(session_id) or not ids.is_tenant_id(tenant_id):
            return None

        async def load() -> SessionRecord | None:
            row = await self._one(
                "SELECT id, tenant_id, profile, title, created_at, node FROM sessions "
                "WHERE id = ? AND tenant_id = ?",
                (session_id, tenant_id),
            )
            return SessionRecord(**dict(row)) if row else None

        return await self._reads.read(("session", tenant_id, session_id), load)

    async def list_sessions(self, tenant_id: str) -> list[SessionRecord]:
        rows = await self._all(
            "SELECT id, tenant_id, profile, title, created_at, node FROM sessions "
            "WHERE tenant_id = ? ORDER BY created_at, id",
            (tenant_id,),
        )
        return [SessionRecord(**dict(r)) for r in rows]

    async def sessions_per_node(self) -> dict[str, int]:
        """How many sessions each node holds (all tenants): placement's and the node list's."""
        rows = await self._all("SELECT node, COUNT(*) AS n FROM sessions GROUP BY node", ())
        return {str(r["node"]): int(r["n"]) for r in rows}

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Delete the tenant's session row; ``False`` if there was none (or not theirs)."""
        if not ids.is_session_id(session_id) or not ids.is_tenant_id(tenant_id):
            return False
        async with self._db.execute(
            "DELETE FROM sessions WHERE id = ? AND tenant_id = ?", (session_id, tenant_id)
        ) as cur:
            deleted = cur.rowcount > 0
        if deleted:
            log.info("session_deleted", tenant=tenant_id, session=session_id)
        return deleted
