"""Tenant-scoped secrets for tools: encrypted at rest, values never logged.

A value is encrypted with Fernet (AES-128-CBC + HMAC-SHA256, `cryptography`) under a key
kept in `<data_dir>/keys/secrets.key` (created 0600 on first use, in a 0700 directory); the
database holds only ciphertext. Names are what the policy, the audit and every listing see.
The values leave this module only for the Executor, which hands them to the one sandbox a
policy grants them to, as environment variables.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from runtime.errors import ConfigError, InvalidInput, NotFound
from runtime.logging import scrub_from_logs
from runtime.store.store import Store

SECRET_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_SECRET_BYTES = 16 * 1024
MAX_SECRETS_PER_TENANT = 200


def check_secret_name(name: object) -> str:
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):  # `$` allows a "\n"
        raise InvalidInput("a secret name is 1-64 of a-z, 0-9 and _, starting with a letter")
    return name


class SecretBox:
    """The data dir's secrets key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fernet: Fernet | None = None

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> SecretBox:
        return cls(Path(data_dir) / "keys" / "secrets.key")

    def fernet(self) -> Fernet:
        if self._fernet is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(Fernet.generate_key())
                    fh.flush()
                    os.fsync(fh.fileno())
            st = os.stat(self.path, follow_symlinks=False)
            if st.st_mode & 0o077:
                raise ConfigError(f"{self.path} must not be readable by group or others")
            self._fernet = Fernet(self.path.read_bytes().strip())
        return self._fernet


class SecretStore:
    def __init__(self, store: Store, box: SecretBox) -> None:
        self.store = store
        self.box = box

    async def set(self, tenant_id: str, name: str, value: str) -> None:
        check_secret_name(name)
        raw = value.encode("utf-8")
        if not raw or len(raw) > MAX_SECRET_BYTES or "\x00" in value:
            raise InvalidInput(f"a secret's value is 1 to {MAX_SECRET_BYTES} bytes, no NUL")
        known = {s["name"] for s in await self.names(tenant_id)}
        if name not in known and len(known) >= MAX_SECRETS_PER_TENANT:
            raise InvalidInput(f"a tenant keeps at most {MAX_SECRETS_PER_TENANT} secrets")
        scrub_from_logs(value)
        token = self.box.fernet().encrypt(raw)
        now = time.time()
        await self.store.connection.execute(
            "INSERT INTO secrets (tenant_id, name, ciphertext, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, name) DO UPDATE SET "
            "ciphertext = excluded.ciphertext, updated_at = excluded.updated_at",
            (tenant_id, name, token, now, now))

    async def names(self, tenant_id: str) -> list[dict[str, Any]]:
        async with self.store.connection.execute(
            "SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = ? "
            "ORDER BY name", (tenant_id,)) as cur:
            rows = await cur.fetchall()
        return [{"name": r[0], "created_at": r[1], "updated_at": r[2]} for r in rows]

    async def delete(self, tenant_id: str, name: str) -> None:
        check_secret_name(name)
        cur = await self.store.connection.execute(
            "DELETE FROM secrets WHERE tenant_id = ? AND name = ?", (tenant_id, name))
        if cur.rowcount == 0:
            raise NotFound(f"no secret named {name!r}")

    async def values(self, tenant_id: str, names: list[str]) -> dict[str, str]:
        """name -> value for the names the tenant has (others are left out)."""
        if not names:
            return {}
        marks = ",".join("?" * len(names))
        async with self.store.connection.execute(
            f"SELECT name, ciphertext FROM secrets WHERE tenant_id = ? AND name IN ({marks})",
            (tenant_id, *names)) as cur:
            rows = await cur.fetchall()
        found: dict[str, str] = {}
        for name, token in rows:
            try:
                found[str(name)] = value = self.box.fernet().decrypt(bytes(token)).decode()
                scrub_from_logs(value)
            except InvalidToken:
                raise ConfigError(f"secret {name!r} cannot be decrypted with this data dir's "
                                  "key (keys/secrets.key replaced?)") from None
        return found
