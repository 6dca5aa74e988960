"""Bearer tokens in the store: minting, authenticating, listing, revoking, the operator tenant.

Tokens are kept only as SHA-256 digests; the plaintext (``navi_`` + 43 url-safe characters)
exists once, in the return value of ``create_token``. A token authenticates while it is
neither revoked nor past its ``expires_at``.

Roles: ``admin`` is the server operator and exists only in the *operator tenant*, the tenant
of the first admin token ever made (the bootstrap admin's, unless ``navi tokens create``
made one earlier). Minting ``admin`` anywhere else is ``Forbidden``; store migration 4 turned
admin tokens that older versions let into other tenants into ``tenant_admin``.

``Tokens`` is a collaborator of ``runtime.store.store.Store``: it is given the store's
connection and read cache, and the store answers its token calls by name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import time
from typing import Any

import aiosqlite

from runtime.errors import Forbidden, InvalidInput, NotFound
from runtime.logging import get_logger
from runtime.store import ids
from runtime.store.models import LABEL_MAX, ROLES, Role, TokenRecord
from runtime.store.read_cache import ReadCache

log = get_logger(__name__)

TOKEN_PLAINTEXT_PREFIX = "navi_"
TOKEN_MAX_CHARS = 256
MAX_EXPIRES_IN_S = 10 * 365 * 86400
_COLUMNS = "id, tenant_id, role, name, created_at, expires_at, revoked_at"


def now() -> float:
    """The store's clock (tests patch this name, nothing else)."""
    return time.time()


def hash_token(plaintext: str) -> str:
    """SHA-256 hex digest of a bearer token (tokens carry 256 random bits: no salt needed)."""
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


def new_token_plaintext() -> str:
    return TOKEN_PLAINTEXT_PREFIX + secrets.token_urlsafe(32)


def check_role(role: object) -> Role:
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}")
    return role


def check_token_name(name: object) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or len(name) > LABEL_MAX or not name.isprintable():
        raise InvalidInput(f"a token name must be printable text of at most {LABEL_MAX} "
                           "characters")
    return name


class Tokens:
    """The tokens table: ``db`` is the store's autocommit connection, ``reads`` its cache of
    rows read while the file is unchanged."""

    def __init__(self, db: aiosqlite.Connection, reads: ReadCache) -> None:
        self._db = db
        self._reads = reads

    async def _token_row(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
        rows = list(await self._db.execute_fetchall(sql, params))  # one thread hop
        return rows[0] if rows else None

    async def operator_tenant(self) -> str | None:
        """The tenant of the first admin token ever made (revoked or not), or ``None``."""
        row = await self._token_row(
            "SELECT tenant_id FROM tokens WHERE role = 'admin' ORDER BY created_at, rowid "
            "LIMIT 1", ())
        return str(row["tenant_id"]) if row is not None else None

    async def create_token(
        self, tenant_id: str, role: Role, name: str | None = None, *,
        expires_at: float | None = None, token_id: str | None = None,
    ) -> tuple[str, TokenRecord]:
        """A new bearer token for ``tenant_id``: ``(plaintext, record)``; only the hash is kept.

        ``token_id`` may be chosen beforehand (so the audit can name it before the token
        exists). ``Forbidden`` for ``admin`` outside the operator tenant; ``NotFound`` for no
        such tenant.
        """
        check_role(role)
        name = check_token_name(name)
        if token_id is not None and not ids.is_token_id(token_id):
            raise InvalidInput("malformed token id")
        if await self._token_row(
                "SELECT 1 FROM tenants WHERE id = ?", (tenant_id,)) is None:
            raise NotFound("no such tenant")
        if role == "admin":
            operator = await self.operator_tenant()
            if operator is not None and operator != tenant_id:
                raise Forbidden("role admin exists only in the operator tenant; "
                                "use tenant_admin to manage this tenant")
        plaintext = new_token_plaintext()
        record = await self.insert_token(tenant_id, role, name, plaintext,
                                          expires_at=expires_at, token_id=token_id)
        return plaintext, record

    async def insert_token(
        self, tenant_id: str, role: Role, name: str | None, plaintext: str, *,
        bootstrap: bool = False, expires_at: float | None = None, token_id: str | None = None,
    ) -> TokenRecord:
        record = TokenRecord(id=token_id or ids.new_token_id(), tenant_id=tenant_id, role=role,
                             name=name, created_at=now(), expires_at=expires_at)
        await self._db.execute(
            "INSERT INTO tokens (id, tenant_id, role, name, token_hash, created_at, "
            "expires_at, bootstrap) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (record.id, tenant_id, role, name, hash_token(plaintext), record.created_at,
             expires_at, int(bootstrap)),
        )
        log.info("token_created", tenant=tenant_id, token_id=record.id, role=role)
        return record

    async def authenticate(self, plaintext: str | None) -> TokenRecord | None:
        """The live token record whose hash matches ``plaintext``, or ``None`` (unknown,
        revoked or expired).

        The lookup is by digest (an attacker cannot steer the comparison byte by byte: the
        digest of their guess is unrelated to the stored one), and the final equality check is
        ``hmac.compare_digest`` anyway.
        """
        if not isinstance(plaintext, str) or not 0 < len(plaintext) <= TOKEN_MAX_CHARS:
            return None
        digest = hash_token(plaintext)

        async def live() -> TokenRecord | None:
            row = await self._token_row(
                f"SELECT {_COLUMNS}, token_hash FROM tokens WHERE token_hash = ?", (digest,))
            if row is None or not hmac.compare_digest(row["token_hash"], digest):
                return None
            if row["revoked_at"] is not None:
                return None
            fields = dict(row)
            del fields["token_hash"]
            return TokenRecord(**fields)

        record = await self._reads.read(("token", digest), live)
        if record is None or (record.expires_at is not None and record.expires_at <= now()):
            return None
        return record

    async def get_token(self, token_id: str, tenant_id: str | None = None) -> TokenRecord | None:
        """The token (scoped to ``tenant_id`` when given: another tenant's is ``None``)."""
        if not ids.is_token_id(token_id):
            return None
        row = await self._token_row(f"SELECT {_COLUMNS} FROM tokens WHERE id = ?", (token_id,))
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            return None
        return TokenRecord(**dict(row))

    async def list_tokens(self, tenant_id: str) -> list[TokenRecord]:
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM tokens WHERE tenant_id = ? ORDER BY created_at, rowid",
            (tenant_id,),
        ) as cur:
            rows = await cur.fetchall()
        return [TokenRecord(**dict(r)) for r in rows]

    async def revoke_token(self, token_id: str, tenant_id: str | None = None) -> bool:
        """Revoke a token (scoped to ``tenant_id`` when given). ``True`` if it was live."""
        if not ids.is_token_id(token_id):
            return False
        sql = "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
        params: tuple[Any, ...] = (now(), token_id)
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params += (tenant_id,)
        async with self._db.execute(sql, params) as cur:
            changed = cur.rowcount > 0
        if changed:
            log.info("token_revoked", token_id=token_id)
        return changed
