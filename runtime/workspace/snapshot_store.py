"""A session's snapshots as both sides of a cluster call them: the quota as a number of bytes.

`runtime.workspace.snapshots.Snapshots` takes an ``admit`` callable (the tenant's quota held
while a copy is made); a callable cannot cross to a node agent. `SnapshotStore` takes the
tenant's disk limit in bytes instead and makes the ``admit`` where the disks are: the API
uses it for this machine's sessions, a node agent for its own
(`runtime.cluster.agent.snapshots`), and `runtime.cluster.control.snapshots.RemoteSnapshots`
offers the same methods over the hop, so `runtime.sessions.snapshots` does not know where a
session lives. Blocking: call from a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runtime.workspace.snapshots import Snapshot, Snapshots, room_for

if TYPE_CHECKING:
    from runtime.workspace.manager import Workspaces


class SnapshotsOfNode(Protocol):
    """The snapshot operations of one node's sessions (blocking)."""

    def list(self, tenant_id: str, session_id: str) -> list[Snapshot]: ...

    def get(self, tenant_id: str, session_id: str, snapshot_id: str) -> Snapshot: ...

    def create(self, tenant_id: str, session_id: str, name: str | None, *, limit: int,
               snapshot_id: str) -> Snapshot: ...

    def delete(self, tenant_id: str, session_id: str, snapshot_id: str) -> None: ...

    def busy(self, tenant_id: str, session_id: str) -> bool: ...

    def restore(self, tenant_id: str, session_id: str, snapshot_id: str, *,
                limit: int) -> None: ...

    def copy_into(self, tenant_id: str, source_id: str, snapshot_id: str | None,
                  target_id: str) -> None: ...


class SnapshotStore:
    """`SnapshotsOfNode` over this machine's `Workspaces`."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self.snapshots = Snapshots(workspaces)

    def list(self, tenant_id: str, session_id: str) -> list[Snapshot]:
        return self.snapshots.list(tenant_id, session_id)

    def get(self, tenant_id: str, session_id: str, snapshot_id: str) -> Snapshot:
        return self.snapshots.get(tenant_id, session_id, snapshot_id)

    def create(self, tenant_id: str, session_id: str, name: str | None, *, limit: int,
               snapshot_id: str) -> Snapshot:
        return self.snapshots.create(tenant_id, session_id, name, snapshot_id=snapshot_id,
                                     admit=room_for(self.workspaces, tenant_id, limit))

    def delete(self, tenant_id: str, session_id: str, snapshot_id: str) -> None:
        self.snapshots.delete(tenant_id, session_id, snapshot_id)

    def busy(self, tenant_id: str, session_id: str) -> bool:
        """A call or file operation holds the session's disk (a restore would be refused)."""
        return self.workspaces.activity.busy((tenant_id, session_id))

    def restore(self, tenant_id: str, session_id: str, snapshot_id: str, *,
                limit: int) -> None:
        self.snapshots.restore(tenant_id, session_id, snapshot_id,
                               admit=room_for(self.workspaces, tenant_id, limit))

    def copy_into(self, tenant_id: str, source_id: str, snapshot_id: str | None,
                  target_id: str) -> None:
        self.snapshots.copy_into(tenant_id, source_id, snapshot_id, target_id)
