"""Opening and ending a session: the one way, for `POST|DELETE /v1/sessions` and the MCP
endpoint alike.

Opening: the profile must exist, be assigned to the tenant and admit the caller's role; the
tenant's `sessions_per_tenant` quota holds; the creation is audited (`session.create`)
before the session exists (fail closed); the session gets a node (`Nodes.place`: this
machine without a cluster) and its disk there is admitted against the tenant's and the data
disk's limits; a session whose disk cannot be made is removed again.

Ending: its pending approvals are denied, its agent turn and runs cancelled, its background
processes stopped, its warm containers dropped, then the record, notes, files and events go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import Forbidden, InvalidInput, QuotaExceeded
from runtime.executor.prewarm import prewarm
from runtime.nodes.elsewhere import held_elsewhere
from runtime.sessions.principal import Principal, subject_for
from runtime.store import SessionRecord
from runtime.store.ids import new_session_id

if TYPE_CHECKING:
    from runtime.sessions.deps import OpenDeps, SessionDeps

MiB = 1024 * 1024


async def open_session(services: OpenDeps, principal: Principal, *,
                       profile: str | None = None, title: str | None = None,
                       session_id: str | None = None, on_node: str | None = None
                       ) -> SessionRecord:
    """``session_id``: an id chosen (and audited) by the caller, e.g. a fork's; ``on_node``:
    made on that node (a fork's, where its source's disk is), not where placement says."""
    tenant_name = await services.tenants.name(principal.tenant_id)
    policy = services.policy
    profile = profile or policy.default_profile(tenant_name) or "developer"
    if profile not in policy.policy.profiles:
        raise InvalidInput(f"unknown profile {profile!r}")
    found = policy.tenant_rule(tenant_name)
    if found is None or profile not in found[1].profiles:
        raise Forbidden(f"profile {profile!r} is not available to this tenant")
    if principal.role not in policy.policy.profiles[profile].roles:
        raise Forbidden(f"role {principal.role!r} may not use profile {profile!r}")
    quotas = policy.quotas(tenant_name)
    uid = await services.tenants.sandbox_uid(principal.tenant_id)
    async with services.session_create_lock:  # the count and the disk admission hold
        sessions = await services.store.list_sessions(principal.tenant_id)
        if len(sessions) >= quotas.sessions_per_tenant:
            raise QuotaExceeded(
                f"the tenant has {quotas.sessions_per_tenant} sessions, its quota; "
                "delete one first", retry_after=60, quota="sessions_per_tenant")
        session_id = session_id or new_session_id()
        node = services.nodes.get(on_node) if on_node else await services.nodes.place()
        elsewhere = await held_elsewhere(  # its disk quota counts every machine's disks
            services.nodes, principal.tenant_id, node, Counter(s.node for s in sessions),
            quotas.session_disk_mb * MiB)
        subject = await subject_for(services, principal, None, profile)
        await services.executor.record_action(  # audited before it exists (fail closed)
            subject.model_copy(update={"session": session_id, "node": node.id}),
            "session.create", session_id, rule=f"profiles.{profile}.roles",
            detail=f"profile {profile}")
        record = await services.store.create_session(
            principal.tenant_id, profile, title=title, session_id=session_id, node=node.id)
        try:
            workspace = await asyncio.to_thread(
                node.create, principal.tenant_id, record.id, uid=uid,
                disk_bytes=quotas.session_disk_mb * MiB,
                tenant_disk_bytes=quotas.tenant_disk_mb * MiB, elsewhere=elsewhere)
        except BaseException:
            await services.store.delete_session(principal.tenant_id, record.id)
            await asyncio.to_thread(node.remove, principal.tenant_id, record.id)
            raise
    if isinstance(workspace, Path):  # its first call warmed in the background, where the
        # node's backend can (runtime.executor.prewarm); the answer does not wait for it
        _spawn(prewarm(services.executor.engine, node.backend, services.executor.resolve_image,
                       subject.model_copy(update={"session": record.id, "node": node.id}),
                       workspace, node.tmp_path(principal.tenant_id, record.id)))
    return record


_prewarming: set[asyncio.Task[bool]] = set()


def _spawn(warming: Coroutine[Any, Any, bool]) -> None:
    task = asyncio.ensure_future(warming)
    _prewarming.add(task)
    task.add_done_callback(_prewarming.discard)


async def end_session(services: SessionDeps, record: SessionRecord) -> None:
    """Delete a session: deny its pending approvals, kill its runs, drop files and events."""
    services.approvals.cancel_session(record.id)
    if services.agent is not None:
        await services.agent.cancel(record.id)
    with contextlib.suppress(Exception):
        await services.executor.cancel_session(record.id)
    if services.kernels is not None:  # its kernels stop, nothing saved
        with contextlib.suppress(Exception):
            await services.kernels.end_session(record.id)
    with contextlib.suppress(Exception):  # its processes end `session_ended`
        await services.processes.end_session(record.id)
    node = services.nodes.for_session(record)
    with contextlib.suppress(Exception):
        await node.backend.release_session(record.id)  # its warm containers
    if services.ports is not None:  # its preview links, proxy pool and relay sockets
        with contextlib.suppress(Exception):
            await services.ports.release_session(record.id)
    await services.store.delete_session(record.tenant_id, record.id)
    await services.tools.notes.drop_session(record.tenant_id, record.id)
    await services.tools.memory.drop_scope(record.tenant_id, f"session:{record.id}")
    services.reads.cut(record.tenant_id, record.id)  # downloads in flight hold its disk
    await asyncio.to_thread(node.remove, record.tenant_id, record.id)
    services.hub.drop(record.id)
