"""Snapshots and fork as the API and the agent use them: audited first, counted in the quota.

The mechanism is ``runtime.workspace.snapshots`` (blocking image copies); this module adds
what a change of state needs here: the audit record before the change (``snapshot.create``,
``snapshot.restore``, ``snapshot.delete``, ``session.fork``; fail closed), the tenant's disk
quota (``quotas.tenant_disk_mb``, snapshots counted at their allocated bytes, a restore at
what it adds to the session's image), and for a fork
a new session made the one way sessions are made (``open_session``: profile, quotas,
``session.create``), on its source's node, which is removed again if its files cannot be
copied. A session on a cluster node has its snapshots there: the same operations go to its
agent by ids (``runtime.cluster.control.snapshots``), the audit record and the busy rule stay
here.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from runtime.errors import Conflict, SessionBusy
from runtime.nodes.base import LOCAL
from runtime.policy.decision import Subject
from runtime.sessions.lifecycle import end_session, open_session
from runtime.store import SessionRecord
from runtime.store.ids import new_session_id
from runtime.workspace.snapshot_store import SnapshotsOfNode, SnapshotStore
from runtime.workspace.snapshots import Snapshot, new_snapshot_id

if TYPE_CHECKING:
    from runtime.sessions.deps import SessionDeps
    from runtime.sessions.principal import Principal

MiB = 1024 * 1024


class SessionSnapshots:
    """The snapshots of the sessions of ``services`` (one per app; cheap to make)."""

    def __init__(self, services: SessionDeps) -> None:
        self.services = services
        self.local = SnapshotStore(services.workspaces)

    def _store(self, node_id: str) -> SnapshotsOfNode:
        """Where the session's snapshots are: this machine's, or its cluster node's (the
        node resolves the ids: ``runtime.cluster.control.snapshots``)."""
        if node_id == LOCAL:
            return self.local
        node = self.services.nodes.get(node_id)  # NodeUnavailable: 503
        store: SnapshotsOfNode | None = getattr(node, "snapshots", None)
        if store is None:
            raise Conflict(f"node {node_id!r} keeps no snapshots")
        return store

    def _limit(self, subject: Subject) -> int:
        """The tenant's disk quota in bytes, held for a snapshot's copy or a restore where
        the disk is (``SnapshotStore``)."""
        return self.services.policy.quotas(subject.policy_tenant).tenant_disk_mb * MiB

    async def list(self, subject: Subject) -> list[Snapshot]:
        store = self._store(subject.node)
        return await asyncio.to_thread(store.list, subject.tenant, subject.session)

    async def create(self, subject: Subject, name: str | None) -> Snapshot:
        store = self._store(subject.node)
        sid = new_snapshot_id()
        await self.services.executor.record_action(
            subject, "snapshot.create", sid, rule=f"roles.{subject.role}", detail=name)
        return await asyncio.to_thread(partial(
            store.create, subject.tenant, subject.session, name, limit=self._limit(subject),
            snapshot_id=sid))

    async def delete(self, subject: Subject, snapshot_id: str) -> None:
        found = await self._get(subject, snapshot_id)
        await self.services.executor.record_action(
            subject, "snapshot.delete", found.id, rule=f"roles.{subject.role}",
            detail=found.name)
        await asyncio.to_thread(self._store(subject.node).delete, subject.tenant,
                                subject.session, found.id)

    async def restore(self, subject: Subject, snapshot_id: str) -> Snapshot:
        """The session's files become the snapshot's; 409 ``session_busy`` during a call."""
        found = await self._get(subject, snapshot_id)
        # downloads in flight end (their bytes would be the files being replaced)
        await asyncio.to_thread(self.services.reads.cut, subject.tenant, subject.session)
        store = self._store(subject.node)
        if await asyncio.to_thread(store.busy, subject.tenant, subject.session):
            raise SessionBusy("the session has a call or file operation in flight; "
                              "restore when it ends")  # refused before anything is recorded
        await self.services.executor.record_action(
            subject, "snapshot.restore", found.id, rule=f"roles.{subject.role}",
            detail=found.name)
        await asyncio.to_thread(partial(store.restore, subject.tenant, subject.session,
                                        found.id, limit=self._limit(subject)))
        return found

    async def fork(self, principal: Principal, subject: Subject, record: SessionRecord,
                   snapshot_id: str | None) -> SessionRecord:
        """A new session of the same tenant and profile with the files of ``record`` (as
        they are now, or as in its snapshot ``snapshot_id``)."""
        if snapshot_id is not None:
            await self._get(subject, snapshot_id)
        new_id = new_session_id()
        await self.services.executor.record_action(
            subject, "session.fork", new_id, rule=f"roles.{subject.role}",
            detail=f"from {record.id}" + (f" snapshot {snapshot_id}" if snapshot_id else ""))
        forked = await open_session(self.services, principal, profile=record.profile,
                                    title=record.title, session_id=new_id,
                                    on_node=record.node)  # the copy stays on that disk
        try:
            await asyncio.to_thread(self._store(forked.node).copy_into, record.tenant_id,
                                    record.id, snapshot_id, forked.id)
        except BaseException:
            await end_session(self.services, forked)
            raise
        return forked

    async def _get(self, subject: Subject, snapshot_id: str) -> Snapshot:
        return await asyncio.to_thread(self._store(subject.node).get, subject.tenant,
                                       subject.session, snapshot_id)
