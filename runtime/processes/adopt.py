"""After a restart: each process whose record says ``running`` is adopted or ended.

Adopted when its container still runs on this machine: the session's lease is taken again,
its egress proxy (if the policy granted egress) served again with the allowlist it was
started with (``runtime.processes.egress``), its output attached again (from now on: what
it wrote while no server read it is lost), its log continued, its lifetime counted from its
start. Its stdin is not: containers are created ``StdinOnce`` (so that closing the attach's
stdin is the program's EOF, ``input {eof: true}``), and the engine closed the program's stdin
when the old server's attach went; ``input`` answers 409 ``conflict``. Otherwise
its record is closed ``interrupted`` (with the exit code, if it had exited) and
``process.exit`` audited. A process on a cluster node is adopted later, once the cluster is
joined (``adopt_node.py``); one that cannot be is closed the same way, and its node is asked
to end it (when it comes back). The ids of
adopted containers are returned: the reaper's start-up sweep removes every other container
of this instance, so none outlives its record.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from runtime.audit.records import AuditEntry
from runtime.errors import NodeUnavailable, SandboxError
from runtime.logging import get_logger
from runtime.nodes.base import LOCAL
from runtime.processes.container import LEASE_GRACE_S
from runtime.processes.egress import ProcessEgress
from runtime.processes.ends import Ends
from runtime.processes.live import LiveProcess
from runtime.processes.models import ProcessRecord
from runtime.sandbox.docker.spec import LABEL_LEASE

if TYPE_CHECKING:
    from runtime.processes.table import ProcessTable

log = get_logger(__name__)

NODE_WAIT_S = 120  # for a node process's node to be reached after a restart
_NODE_ENDS: set[asyncio.Future[None]] = set()


async def adopt_all(table: ProcessTable, ends: Ends) -> frozenset[str]:
    rows = await table.records.running()
    if not rows:
        return frozenset()
    containers = ends.containers_for(table.docker())
    found = await containers.listed()
    kept: set[str] = set()
    for record, egress in rows:
        if record.node != LOCAL:  # adopted once the cluster is joined (``adopt_node.py``)
            continue
        summary = found.get(record.id)
        alive = summary is not None and summary.get("State") == "running" and \
            summary.get("Id") == record.container
        if alive and record.node == LOCAL:
            try:
                assert summary is not None
                await _adopt(table, ends, record, summary, egress)
                kept.add(str(summary["Id"]))
                continue
            except Exception as exc:
                log.warning("process_adopt_failed", process=record.id, error=str(exc))
        await close_interrupted(table, ends, record, summary)
    log.info("processes_adopted", adopted=len(kept))
    return frozenset(kept)


async def _adopt(table: ProcessTable, ends: Ends, record: ProcessRecord,
                 summary: dict[str, Any], egress: bool) -> None:
    services = table.services
    containers = ends.containers
    node = services.nodes.get(record.node)
    lease = await asyncio.to_thread(node.open, record.tenant_id, record.session_id)
    proxy = None
    try:
        if egress:
            proxy = await ProcessEgress(containers.backend).reopen(record.id)
            if proxy is None:
                raise SandboxError("its egress allowlist was not kept")
        attached = await containers.reattach(str(summary["Id"]))
    except BaseException:
        if proxy is not None:
            await proxy.close()
        await asyncio.to_thread(lease.close)
        raise
    outlog = await asyncio.to_thread(ends.log_of, record)
    live = LiveProcess(record, str(summary["Id"]), attached, outlog,
                       services.hub.bus(record.session_id))
    live.stdin_open = False  # its stdin went with the last server's attach
    live.closers.append(lambda: asyncio.to_thread(lease.close))
    if proxy is not None:
        live.closers += [proxy.close, lambda: ProcessEgress(containers.backend).forget(record.id)]
    lease_until = float((summary.get("Labels") or {}).get(LABEL_LEASE, "0") or 0)
    lifetime_s = max(0.0, lease_until - 1 - LEASE_GRACE_S - record.started_at)
    table.places.hold(record.tenant_id, record.session_id, record.id,
                                  record.ports)
    ends.watch(live, lifetime_s)
    log.info("process_adopted", process=record.id, session=record.session_id)


async def _end_on_node(table: ProcessTable, record: ProcessRecord) -> None:
    """A node process that could not be adopted (its node not reached): the node is asked
    to end it (nothing when it ended already) once it is there again."""
    for _ in range(NODE_WAIT_S):
        try:
            node = table.services.nodes.get(record.node)
        except NodeUnavailable:
            await asyncio.sleep(1.0)
            continue
        remote = getattr(node, "processes", None)
        if remote is not None:
            with contextlib.suppress(Exception):
                await remote.end(record.tenant_id, record.session_id, record.id)
        return


async def close_interrupted(table: ProcessTable, ends: Ends, record: ProcessRecord,
                 summary: dict[str, Any] | None) -> None:
    if record.node != LOCAL:
        ending = asyncio.ensure_future(_end_on_node(table, record))
        _NODE_ENDS.add(ending)
        ending.add_done_callback(_NODE_ENDS.discard)
    code = None
    if summary is not None:
        state = await ends.containers.state(str(summary["Id"])) or {}
        if not state.get("Running"):
            code = state.get("ExitCode")
    outlog = ends.log_of(record)
    size = outlog.end
    outlog.close()
    await ProcessEgress(ends.containers.backend).forget(record.id)
    await table.records.close(record.id, exit_code=code, reason="interrupted",
                                output_bytes=size)
    with contextlib.suppress(Exception):
        await table.services.audit.append(AuditEntry(
            kind="action", action="process.exit", object=record.id, tenant=record.tenant_id,
            user=record.token_id, session=record.session_id, exec_id=record.id,
            exit_code=code, stdout_size=size, decision="allow",
            detail="reason interrupted (the server restarted)", node=record.node))
