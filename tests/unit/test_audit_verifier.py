"""`GET /v1/audit/verify` behind the scenes (docs/audit.md): a tenant is told only its
own figures (its records, the first of them found wrong) beside the whole chain's `ok`; the
full re-hash runs on a worker of its own (never the shared default pool), once per state of
the log, and concurrent askers share one run. Real audit logs on disk."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from runtime.audit import AuditEntry, AuditLog, verify_store
from runtime.audit.verifier import ChainVerifier


async def _write(log: AuditLog, tenants: list[str]) -> None:
    for tenant in tenants:
        await log.append(AuditEntry(kind="action", action="session.create", object="s",
                                    tenant=tenant, session="s", decision="allow", rule="r"))


def _tamper(data: Path, seq: int) -> None:
    with closing(sqlite3.connect(data / "audit.sqlite3")) as db, db:
        body = db.execute("SELECT body FROM audit WHERE seq = ?", (seq,)).fetchone()[0]
        db.execute("UPDATE audit SET body = ? WHERE seq = ?",
                   (body.replace('"object":"s"', '"object":"x"'), seq))


async def test_a_tenant_gets_its_own_counts_and_bad_record(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with AuditLog(data) as log:
        await _write(log, ["a", "b", "a", "a", "b"])  # seqs 1..5
    report = verify_store(data)
    assert report.public() == {"ok": True, "records": 5, "first_bad_seq": None}
    assert report.for_tenant("a") == {"ok": True, "records": 3, "first_bad_seq": None}
    assert report.for_tenant("b") == {"ok": True, "records": 2, "first_bad_seq": None}
    assert report.for_tenant("c") == {"ok": True, "records": 0, "first_bad_seq": None}
    assert "tenant_records" not in report.model_dump_json()  # the CLI's --json as before

    _tamper(data, 3)  # a's record
    report = verify_store(data)
    assert report.public() == {"ok": False, "records": 5, "first_bad_seq": 3}
    assert report.for_tenant("a") == {"ok": False, "records": 3, "first_bad_seq": 3}
    # the chain is one: b learns it is broken, not where, nor how long the log is
    assert report.for_tenant("b") == {"ok": False, "records": 2, "first_bad_seq": None}
    _tamper(data, 5)
    assert verify_store(data).for_tenant("b") == {"ok": False, "records": 2,
                                                  "first_bad_seq": 5}


async def test_the_check_runs_once_per_state_of_the_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with AuditLog(data) as log:
        verifier = ChainVerifier(data, head=lambda: log.head)
        try:
            await _write(log, ["a", "b"])
            first = await verifier.report()
            again = await verifier.report()
            assert first.records == again.records == 2 and verifier.runs == 1
            await _write(log, ["a"])
            together = await asyncio.gather(*(verifier.report() for _ in range(8)))
            assert {r.records for r in together} == {3} and verifier.runs == 2
            _tamper(data, 1)  # behind the writer's back: the file changed
            assert (await verifier.report()).first_bad_seq == 1 and verifier.runs == 3
        finally:
            verifier.close()


async def test_askers_while_a_check_runs_share_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with AuditLog(data) as log:
        for _ in range(3000):  # a log that takes a while to re-hash
            await log.append(AuditEntry(kind="action", action="file.write", object="f",
                                        tenant="a", session="s", decision="allow", rule="r"),
                             durable=False)
        verifier = ChainVerifier(data, head=lambda: log.head)
        try:
            asked = [asyncio.ensure_future(verifier.report()) for _ in range(6)]
            await asyncio.sleep(0)  # all six asked
            await _write(log, ["a"])  # the log changes while the check runs
            reports = await asyncio.gather(*asked)
        finally:
            verifier.close()
    assert verifier.runs == 1 and len({id(r) for r in reports}) == 1  # one report for all


async def test_the_check_does_not_wait_for_the_shared_thread_pool(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with AuditLog(data) as log:
        await _write(log, ["a"])
    verifier = ChainVerifier(data)
    release = threading.Event()
    loop = asyncio.get_running_loop()
    # every thread of the default pool busy (as with a burst of file operations)
    size = min(32, (os.cpu_count() or 1) + 4)
    busy = [loop.run_in_executor(None, release.wait) for _ in range(size + 4)]
    try:
        report = await asyncio.wait_for(verifier.report(), 10)
        assert report.ok and report.records == 1
    finally:
        release.set()
        await asyncio.gather(*busy)
        verifier.close()
