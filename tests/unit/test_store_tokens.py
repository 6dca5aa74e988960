"""Tokens in the store on a real file: migration 4 from a version-3 database, the operator
tenant, expiry; `navi tokens` keeps to the same rules and audits; `navi audit verify` on a
log that mixes records from before `action`/`object` with new ones."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from unittest.mock import patch

import aiosqlite
import pytest
from typer.testing import CliRunner

from runtime.audit import AuditLog, AuditRecord
from runtime.audit.records import GENESIS_HASH, canonical_json, record_hash
from runtime.cli import app
from runtime.errors import Forbidden
from runtime.executor import Executor
from runtime.policy.decision import Subject
from runtime.policy.engine import PolicyEngine
from runtime.sandbox.fake import FakeBackend
from runtime.store import MIGRATIONS, Store, hash_token
from runtime.store import tokens as store_tokens
from runtime.store.migrations import apply_migrations

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


async def _version_3(path: Path) -> None:
    """A database as version 3 left it: admins in two tenants, a label, a revoked token."""
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await apply_migrations(db, MIGRATIONS[:3])
        for tid, name, at in [("t_" + "1" * 16, "admin", 1.0), ("t_" + "2" * 16, "lab", 2.0)]:
            await db.execute("INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)",
                             (tid, name, at))
        rows = [("k_" + "a" * 16, "t_" + "1" * 16, "admin", "bootstrap", "one", 10.0, None, 1),
                ("k_" + "b" * 16, "t_" + "2" * 16, "admin", "lab boss", "two", 11.0, None, 0),
                ("k_" + "c" * 16, "t_" + "2" * 16, "user", None, "three", 12.0, 13.0, 0)]
        for tid, tenant, role, label, plain, at, revoked, boot in rows:
            await db.execute(
                "INSERT INTO tokens (id, tenant_id, role, label, token_hash, created_at, "
                "revoked_at, bootstrap) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tid, tenant, role, label, hash_token(plain), at, revoked, boot))
    finally:
        await db.close()


async def test_migration_4_rebuilds_tokens(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    await _version_3(path)
    async with await Store.open(path) as store:
        operator = await store.operator_tenant()
        assert operator == "t_" + "1" * 16
        first = await store.authenticate("one")
        assert first is not None and first.role == "admin" and first.name == "bootstrap"
        stray = await store.authenticate("two")  # an admin outside the operator tenant
        assert stray is not None and stray.role == "tenant_admin" and stray.name == "lab boss"
        assert await store.authenticate("three") is None  # still revoked
        listed = await store.list_tokens("t_" + "2" * 16)
        assert [t.id for t in listed] == ["k_" + "b" * 16, "k_" + "c" * 16]
        assert listed[1].revoked_at == 13.0 and listed[1].expires_at is None
        with pytest.raises(Forbidden):
            await store.create_token("t_" + "2" * 16, "admin")
        _, made = await store.create_token(operator, "admin", "second")
        assert made.role == "admin"
    con = sqlite3.connect(path)
    try:
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'tokens'").fetchone()[0]
        indexes = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE tbl_name = 'tokens' AND type = 'index'")}
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("UPDATE tokens SET role = 'root'")
    finally:
        con.close()
    assert "tenant_admin" in sql and "expires_at" in sql and "label" not in sql
    assert "tokens_by_tenant" in indexes


async def test_bootstrap_joins_the_operator_tenant(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "navi.sqlite3") as store:
        lab = await store.create_tenant("lab")
        await store.create_token(lab.id, "admin")  # e.g. `navi tokens create` before serve
        boot = await store.ensure_bootstrap_admin("bootstrap-secret-0123456789")
        assert boot.tenant_id == lab.id == await store.operator_tenant()
        assert await store.get_tenant_by_name("admin") is None


async def test_expiry(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "navi.sqlite3") as store:
        tenant = await store.create_tenant("acme")
        t0 = store_tokens.now()
        plain, record = await store.create_token(tenant.id, "user", expires_at=t0 + 10)
        assert (await store.authenticate(plain)) == record
        with patch("runtime.store.tokens.now", return_value=t0 + 10):
            assert await store.authenticate(plain) is None


def _cli(*args: str):  # noqa: ANN202
    return runner.invoke(app, list(args))


def test_cli_tokens_follow_the_roles_and_are_audited(tmp_path: Path) -> None:
    data = str(tmp_path)
    first = json.loads(_cli("tokens", "create", "--tenant", "ops", "--role", "admin",
                            "--data-dir", data, "--json", "--name", "root").stdout)
    assert first["name"] == "root" and first["expires_at"] is None
    refused = _cli("tokens", "create", "--tenant", "lab", "--role", "admin", "--data-dir", data)
    assert refused.exit_code == 2 and "operator tenant" in refused.stderr
    boss = json.loads(_cli("tokens", "create", "--tenant", "lab", "--role", "tenant_admin",
                           "--data-dir", data, "--json", "--expires-in", "3600").stdout)
    assert boss["role"] == "tenant_admin" and boss["expires_at"] is not None
    listed = _cli("tokens", "list", "--tenant", "lab", "--data-dir", data)
    assert boss["id"] in listed.stdout and "tenant_admin" in listed.stdout
    assert boss["token"] not in listed.stdout
    assert _cli("tokens", "revoke", boss["id"], "--data-dir", data).exit_code == 0

    async def audit() -> list[AuditRecord]:
        async with AuditLog(tmp_path) as log:
            return await log.records()

    got = [(r.action, r.object, r.user) for r in asyncio.run(audit())]
    assert got == [("tenant.create", first["tenant_id"], "cli"),
                   ("token.create", first["id"], "cli"),
                   ("tenant.create", boss["tenant_id"], "cli"),
                   ("token.create", boss["id"], "cli"),
                   ("token.revoke", boss["id"], "cli")]
    assert _cli("audit", "verify", "--data-dir", data).exit_code == 0


def _write_old_records(data_dir: Path, count: int) -> None:
    """Records as versions before `action`/`object` wrote them (no such keys in the body)."""
    con = sqlite3.connect(data_dir / "audit.sqlite3")
    prev = con.execute("SELECT hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    prev_hash, seq = (prev[0] if prev else GENESIS_HASH), con.execute(
        "SELECT COUNT(*) FROM audit").fetchone()[0]
    lines = []
    with con:
        for _ in range(count):
            seq += 1
            body = {"kind": "intent", "tenant": "t_old", "session": "s_old", "exec_id": f"ex_{seq}",
                    "tool": "code_exec", "decision": "allow", "rule": "r", "seq": seq,
                    "ts": "2026-01-01T00:00:00.000000+00:00", "instance": "old",
                    "prev_hash": prev_hash, "user": "k_old"}
            body["hash"] = prev_hash = record_hash(body)
            text = canonical_json(body)
            con.execute(
                "INSERT INTO audit (seq, ts, kind, tenant, session, exec_id, tool, instance, "
                "prev_hash, hash, body) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (seq, body["ts"], "intent", "t_old", "s_old", body["exec_id"], "code_exec",
                 "old", body["prev_hash"], body["hash"], text))
            lines.append(text + "\n")
    con.close()
    with (data_dir / "audit.jsonl").open("a") as fh:
        fh.writelines(lines)


async def test_verify_passes_on_old_and_new_records(tmp_path: Path) -> None:
    async with AuditLog(tmp_path, checkpoint_every=10**6, checkpoint_interval_s=10**6):
        pass  # schema, keys, a checkpoint of the empty log
    _write_old_records(tmp_path, 3)
    engine = PolicyEngine.from_file(ROOT / "policies" / "default.yaml")
    async with AuditLog(tmp_path) as log:  # the old intents get closed as interrupted
        executor = Executor(engine=engine, backend=FakeBackend(), audit=log,
                            resolve_image=lambda name: name)
        seq = await executor.record_action(
            Subject(tenant="t_new", user="k_new", session="none"), "token.create",
            "k_" + "d" * 16, rule="roles.admin.manage", detail="role: user")
        records = await log.records()
        execs = await log.records(action="exec")
        changes = await log.records(action="token.create")
    old = [r for r in records if r.instance == "old"]
    assert len(old) == 3 and all(r.action == "exec" and r.object is None for r in old)
    assert all("action" not in json.loads(canonical_json(r.model_dump(exclude_unset=True)))
               for r in old)
    assert [r.seq for r in changes] == [seq] and seq not in [r.seq for r in execs]
    assert {r.seq for r in old} <= {r.seq for r in execs}  # no action: an execution's
    new = records[-1]
    assert new.seq == seq and (new.kind, new.action, new.object) == (
        "action", "token.create", "k_" + "d" * 16)
    result = _cli("audit", "verify", "--data-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    # and a record rewritten to claim another action breaks the chain
    con = sqlite3.connect(tmp_path / "audit.sqlite3")
    with con:
        body = json.loads(con.execute("SELECT body FROM audit WHERE seq = ?", (seq,)).fetchone()[0])
        body["action"] = "session.create"
        con.execute("UPDATE audit SET body = ? WHERE seq = ?", (canonical_json(body), seq))
    con.close()
    assert _cli("audit", "verify", "--data-dir", str(tmp_path)).exit_code != 0
