"""After a restart, once the cluster is joined: each process on a cluster node is adopted.

Why: a node process outlives its control plane (a shutdown that keeps processes, or a
crash): its node goes on running it and keeps its output in a log of its own
(`runtime.cluster.agent.process_runs`). The next start asks the node to re-attach each
record still ``running`` (`process_attach`, by tenant, session and record id) with the
offset where this side's log ends; the node streams its output from there, so nothing it
still holds is lost or doubled (it holds the last 4 MiB at least; a note in the log marks
any gap). It is then a `NodeLiveProcess` as at its start: input (the node kept its stdin
open), signals, stop, its lifetime cap and token counted from its start, its ports through
the node's relay, its end recorded. One the node ended meanwhile is adopted too and ends
with its own exit state (``exited``, its code) once its remaining output is in. One the node
no longer has (the node's agent restarted, the node is gone) ends ``interrupted``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from runtime.errors import NodeUnavailable
from runtime.logging import get_logger
from runtime.nodes.base import LOCAL
from runtime.processes.adopt import close_interrupted
from runtime.processes.ends import Ends
from runtime.processes.models import ProcessRecord
from runtime.processes.on_node import NodeLiveProcess, relay_ports

if TYPE_CHECKING:
    from runtime.processes.table import ProcessTable

log = get_logger(__name__)

ATTACH_S = 60.0  # for a node to answer a re-attach


async def adopt_on_nodes(table: ProcessTable, ends: Ends) -> int:
    """Adopt (or close) every running record of a node process; how many were adopted."""
    rows = [record for record, _ in await table.records.running()
            if record.node != LOCAL and record.id not in table.live]
    if not rows:
        return 0
    adopted = await asyncio.gather(*(_adopt(table, ends, record) for record in rows))
    log.info("node_processes_adopted", adopted=sum(adopted), ended=len(rows) - sum(adopted))
    return sum(adopted)


async def _adopt(table: ProcessTable, ends: Ends, record: ProcessRecord) -> bool:
    services = table.services
    try:
        remote = getattr(services.nodes.get(record.node), "processes", None)
        if remote is None:
            raise NodeUnavailable(record.node)
        outlog = await asyncio.to_thread(ends.log_of, record)
        try:
            stream, attached = await asyncio.wait_for(remote.attach(
                record.tenant_id, record.session_id, record.id, outlog.end), ATTACH_S)
        except BaseException:
            await asyncio.to_thread(outlog.close)
            raise
    except Exception as exc:
        log.warning("node_process_not_adopted", process=record.id, node=record.node,
                    error=str(exc))
        await close_interrupted(table, ends, record, None)
        return False
    if attached.offset > outlog.end:  # the node kept less than was missed here
        note = f"\n[navi: {attached.offset - outlog.end} bytes of output lost while the " \
               "control plane was away]\n"
        await asyncio.to_thread(outlog.append, note.encode(), "stderr")
    live = NodeLiveProcess(record, stream, outlog, services.hub.bus(record.session_id))
    live.stdin_open = attached.stdin_open
    table.places.hold(record.tenant_id, record.session_id, record.id, record.ports)
    relay_ports(services, remote, record)  # reached over the hop, as at its start
    ends.watch(live, attached.lifetime_s)
    log.info("node_process_adopted", process=record.id, node=record.node,
             offset=attached.offset)
    return True
