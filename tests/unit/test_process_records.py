"""The `processes` table (a real SQLite file): a session keeps its newest 100 ended records,
rows go with their session, and a tenant's output logs count in its disk quota."""

from __future__ import annotations

import time
from pathlib import Path

from runtime.processes.models import ProcessRecord
from runtime.processes.outlog import OutputLog, tenant_log_bytes
from runtime.processes.records import KEEP_ENDED, ProcessStore
from runtime.store import Store


def record(tenant: str, session: str, n: int) -> ProcessRecord:
    return ProcessRecord(id=f"p_{n:016x}", name=None, command="true", cwd="/workspace",
                         state="running", started_at=time.time() + n, tenant_id=tenant,
                         session_id=session)


async def test_newest_ended_records_are_kept_and_go_with_the_session(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "navi.sqlite3")
    try:
        tenant = await store.create_tenant("acme")
        session = await store.create_session(tenant.id, "developer")
        other = await store.create_session(tenant.id, "developer")
        records = ProcessStore(store)
        for n in range(KEEP_ENDED + 5):
            await records.insert(record(tenant.id, session.id, n), egress=False)
        await records.insert(record(tenant.id, other.id, 999), egress=True)
        for n in range(KEEP_ENDED + 4):  # one stays running
            closed = await records.close(f"p_{n:016x}", exit_code=0, reason="exited",
                                         output_bytes=n)
            assert closed is not None and closed.state == "exited"
        again = await records.close("p_0000000000000063", exit_code=9, reason="stopped",
                                    output_bytes=0)
        assert again is not None and again.exit_code == 0, "closing twice changes nothing"
        kept = await records.for_session(tenant.id, session.id)
        ended = [r for r in kept if r.state == "exited"]
        assert len(ended) == KEEP_ENDED and len(kept) == KEEP_ENDED + 1
        assert ended[0].id == "p_0000000000000004", "the oldest ended ones went"
        assert [(r.id, egress) for r, egress in await records.running()] == [
            ("p_0000000000000068", False), ("p_00000000000003e7", True)]
        assert await records.get("t_other", session.id, "p_0000000000000068") is None
        await store.delete_session(tenant.id, session.id)
        assert await records.for_session(tenant.id, session.id) == []
    finally:
        await store.close()


def test_a_tenants_logs_count_on_disk(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "t_1" / "s_1" / "p_1.log")
    log.append(b"x" * 100_000)
    log.close()
    assert tenant_log_bytes(tmp_path, "t_1") >= 100_000
    assert tenant_log_bytes(tmp_path, "t_2") == 0
