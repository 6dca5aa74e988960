"""The SQLite store on a real file: hashes only on disk, tenant scoping, migrations, bootstrap."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtime.errors import ConfigError, Conflict, InvalidInput, NotFound
from runtime.store import MIGRATIONS, Store, hash_token, is_session_id, is_tenant_id


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store.open(tmp_path / "navi.sqlite3")
    yield s
    await s.close()


def _raw_bytes(db_path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm"):
        p = db_path.with_name(db_path.name + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


async def test_open_uses_wal_and_private_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "navi.sqlite3"
    async with await Store.open(path) as s:
        async with s.connection.execute("PRAGMA journal_mode") as cur:
            assert (await cur.fetchone())[0] == "wal"
    assert path.stat().st_mode & 0o777 == 0o600


async def test_token_plaintext_never_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as s:
        tenant = await s.create_tenant("acme")
        plaintext, record = await s.create_token(tenant.id, "user", name="ci")
        assert plaintext.startswith("navi_") and len(plaintext) >= 45
        assert record.tenant_id == tenant.id and record.role == "user"
        assert "hash" not in record.model_dump()
        raw = _raw_bytes(path)
    assert plaintext.encode() not in raw
    assert plaintext[5:].encode() not in raw
    assert hash_token(plaintext).encode() in raw  # what is stored is the digest


async def test_authenticate_and_revoke(store: Store) -> None:
    tenant = await store.create_tenant("acme")
    plaintext, record = await store.create_token(tenant.id, "auditor")
    got = await store.authenticate(plaintext)
    assert got is not None and got.id == record.id and got.role == "auditor"
    assert await store.authenticate(plaintext + "x") is None
    assert await store.authenticate(plaintext[:-1]) is None
    assert await store.authenticate("") is None
    assert await store.authenticate(None) is None
    assert await store.authenticate("navi_" + "a" * 5000) is None
    assert await store.revoke_token(record.id) is True
    assert await store.revoke_token(record.id) is False
    assert await store.authenticate(plaintext) is None


async def test_revoke_is_tenant_scoped(store: Store) -> None:
    a = await store.create_tenant("a")
    b = await store.create_tenant("b")
    plaintext, record = await store.create_token(a.id, "user")
    assert await store.revoke_token(record.id, tenant_id=b.id) is False
    assert await store.authenticate(plaintext) is not None


async def test_tenant_names_unique_and_validated(store: Store) -> None:
    t = await store.create_tenant("Acme")
    assert is_tenant_id(t.id)
    with pytest.raises(Conflict):
        await store.create_tenant("acme")
    for bad in ["", "-x", "a b", "a/b", "../x", "x" * 65, "ä", "a\x00"]:
        with pytest.raises(InvalidInput):
            await store.create_tenant(bad)
    assert [x.name for x in await store.list_tenants()] == ["Acme"]
    assert await store.get_tenant_by_name("ACME") == t
    assert await store.get_tenant(t.id) == t
    assert await store.get_tenant("t_0000000000000000") is None
    assert await store.get_tenant("'; DROP TABLE tenants; --") is None


async def test_roles_validated(store: Store) -> None:
    t = await store.create_tenant("acme")
    with pytest.raises(InvalidInput):
        await store.create_token(t.id, "root")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await store.create_token("t_0000000000000000", "user")


async def test_sessions_are_tenant_scoped(store: Store) -> None:
    a = await store.create_tenant("a")
    b = await store.create_tenant("b")
    s1 = await store.create_session(a.id, "developer", title="first")
    s2 = await store.create_session(a.id, "strict")
    sb = await store.create_session(b.id, "developer")
    assert is_session_id(s1.id) and s1.title == "first"
    assert await store.get_session(a.id, s1.id) == s1
    assert await store.get_session(b.id, s1.id) is None  # another tenant's: simply absent
    assert [s.id for s in await store.list_sessions(a.id)] == [s1.id, s2.id]
    assert [s.id for s in await store.list_sessions(b.id)] == [sb.id]
    assert await store.delete_session(b.id, s1.id) is False
    assert await store.get_session(a.id, s1.id) == s1
    assert await store.delete_session(a.id, s1.id) is True
    assert await store.get_session(a.id, s1.id) is None
    assert await store.get_session(a.id, "../../etc") is None
    with pytest.raises(InvalidInput):
        await store.create_session(a.id, "../x")
    with pytest.raises(NotFound):
        await store.create_session("t_0000000000000000", "developer")


async def test_migrations_idempotent_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as s:
        t = await s.create_tenant("acme")
    for _ in range(2):
        async with await Store.open(path) as s:
            assert await s.get_tenant(t.id) == t
    con = sqlite3.connect(path)
    try:
        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations")]
    finally:
        con.close()
    assert versions == [m.version for m in MIGRATIONS]


async def test_database_newer_than_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path):
        pass
    con = sqlite3.connect(path)
    con.execute("INSERT INTO schema_migrations VALUES (99, 'future', 0)")
    con.commit()
    con.close()
    with pytest.raises(ConfigError):
        await Store.open(path)


async def test_bootstrap_admin_idempotent_and_rotates(store: Store) -> None:
    first = "bootstrap-secret-0123456789"
    rec = await store.ensure_bootstrap_admin(first)
    assert rec.role == "admin"
    again = await store.ensure_bootstrap_admin(first)
    assert again.id == rec.id
    admins = [t for t in await store.list_tenants() if t.name == "admin"]
    assert len(admins) == 1 and admins[0].id == rec.tenant_id
    assert (await store.authenticate(first)).id == rec.id  # type: ignore[union-attr]
    second = "rotated-secret-abcdefghijkl"
    rec2 = await store.ensure_bootstrap_admin(second)
    assert rec2.id != rec.id and rec2.tenant_id == rec.tenant_id
    assert await store.authenticate(first) is None
    assert (await store.authenticate(second)).id == rec2.id  # type: ignore[union-attr]
    with pytest.raises(ConfigError):
        await store.ensure_bootstrap_admin("short")


async def test_bootstrap_token_revocation_wins(store: Store) -> None:
    secret = "bootstrap-secret-0123456789"
    rec = await store.ensure_bootstrap_admin(secret)
    await store.revoke_token(rec.id)
    again = await store.ensure_bootstrap_admin(secret)
    assert again.id == rec.id and again.revoked_at is not None
    assert await store.authenticate(secret) is None


async def test_two_connections_share_the_file(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as a, await Store.open(path) as b:
        t = await a.create_tenant("acme")
        plaintext, _ = await b.create_token(t.id, "user")
        assert await a.authenticate(plaintext) is not None
