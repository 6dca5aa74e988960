"""A session's node: kept in the store (migration 7), carried by the subject into every audit
record of an execution and into its exec result; a node lost under a call closes it
`interrupted`. Real SQLite files, a real audit log, the fake backend."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from runtime.audit import AuditLog, verify_store
from runtime.audit.records import AuditEntry
from runtime.errors import NaviError
from runtime.executor import Executor, Invocation
from runtime.policy import Action, PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.store import MIGRATIONS, Store
from runtime.store.migrations import apply_migrations

ROOT = Path(__file__).resolve().parents[2]
PY = Action(tool="code_exec", args={"language": "python", "code": "print(1)"})
RUN = Invocation(argv=["python3", "-c", "print(1)"])


class Lost(NaviError):  # the code the seam's NodeUnavailable carries
    code = "node_unavailable"


def executor(audit: AuditLog, backend: FakeBackend) -> Executor:
    return Executor(engine=PolicyEngine.from_file(ROOT / "policies" / "default.yaml"),
                    backend=backend, audit=audit,
                    resolve_image=lambda name: f"navi/{name}:latest")


async def test_sessions_keep_their_node_and_count_per_node(tmp_path: Path) -> None:
    path = tmp_path / "navi.sqlite3"
    async with await Store.open(path) as store:
        t = await store.create_tenant("acme")
        plain = await store.create_session(t.id, "developer")
        on_n2 = await store.create_session(t.id, "developer", node="n2")
        await store.create_session(t.id, "developer", node="n2")
        assert plain.node == "local" and on_n2.node == "n2"
        assert await store.sessions_per_node() == {"local": 1, "n2": 2}
    async with await Store.open(path) as store:  # read back from the file, not the cache
        assert (await store.get_session(t.id, on_n2.id)).node == "n2"  # type: ignore[union-attr]
        assert [s.node for s in await store.list_sessions(t.id)].count("n2") == 2


async def test_a_session_made_before_migration_7_lives_on_the_local_node(
    tmp_path: Path,
) -> None:
    path = tmp_path / "navi.sqlite3"
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await apply_migrations(db, MIGRATIONS[:6])
        await db.execute("INSERT INTO tenants (id, name, created_at) "
                         "VALUES ('t_00000000000000aa', 'old', 0)")
        await db.execute("INSERT INTO sessions (id, tenant_id, profile, created_at) VALUES "
                         "('s_00000000000000aa', 't_00000000000000aa', 'developer', 0)")
    async with await Store.open(path) as store:
        old = await store.get_session("t_00000000000000aa", "s_00000000000000aa")
        assert old is not None and old.node == "local"
    with sqlite3.connect(path) as con:
        assert max(r[0] for r in con.execute("SELECT version FROM schema_migrations")) == \
            MIGRATIONS[-1].version  # every later migration applied too


async def test_every_record_of_an_execution_and_its_result_name_the_node(
    audit: AuditLog,
) -> None:
    out = await executor(audit, FakeBackend()).execute(
        Subject(tenant="acme", session="s1", node="n2"), PY, RUN)
    assert out.execution.node == "n2" and out.public()["node"] == "n2"
    records = await audit.records(exec_id=out.exec_id)
    assert [(r.kind, r.node) for r in records] == [("intent", "n2"), ("outcome", "n2")]
    plain = await executor(audit, FakeBackend()).execute(Subject(tenant="acme"), PY, RUN)
    assert plain.execution.node == "local"
    assert (await asyncio.to_thread(verify_store, audit.data_dir)).ok


async def test_a_node_lost_under_a_call_closes_it_interrupted(audit: AuditLog) -> None:
    backend = FakeBackend([FakeResponse(raises=Lost("node n2 is unavailable"))])
    with pytest.raises(Lost):
        await executor(audit, backend).execute(Subject(tenant="acme", node="n2"), PY, RUN)
    kinds = [(r.kind, r.node, r.detail) for r in await audit.records()]
    assert kinds[-2][0] == "intent"
    assert kinds[-1] == ("interrupted", "n2", "node n2 is unavailable")


class OldEntry(AuditEntry):
    """An entry as a writer from before `node` made it: no such key in its body."""

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        body = super().model_dump(**kw)
        body.pop("node")
        return body


async def test_records_written_without_a_node_still_verify(audit: AuditLog) -> None:
    old = await audit.append(OldEntry(kind="action", action="session.create", tenant="acme"))
    await executor(audit, FakeBackend()).execute(Subject(tenant="acme", node="n1"), PY, RUN)
    with sqlite3.connect(audit.db_path) as con:
        bodies = [json.loads(b) for (b,) in con.execute("SELECT body FROM audit ORDER BY seq")]
    assert "node" not in bodies[0] and [b["node"] for b in bodies[1:]] == ["n1", "n1"]
    assert (await audit.records())[0].seq == old.seq and old.node is None
    assert (await asyncio.to_thread(verify_store, audit.data_dir)).ok
