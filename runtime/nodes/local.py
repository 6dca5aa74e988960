"""This process's own node: today's `Workspaces` and sandbox backend, nothing in between.

Each method hands straight to the `Workspaces` method of the same name (`open` returns the
`Workspace` as before), so going through the node costs one call frame.
"""

from __future__ import annotations

from pathlib import Path

from runtime.nodes.base import LOCAL
from runtime.sandbox.backend import SandboxBackend
from runtime.workspace import Workspace, Workspaces
from runtime.workspace.disk import NOTHING, TenantBytes
from runtime.workspace.tmpdir import Root


class LocalNode:
    """`SessionNode` over the local disks and engine."""

    def __init__(self, workspaces: Workspaces, backend: SandboxBackend, *,
                 node_id: str = LOCAL) -> None:
        self.workspaces = workspaces
        self._backend = backend
        self._id = node_id

    @property
    def id(self) -> str:
        return self._id

    @property
    def backend(self) -> SandboxBackend:
        return self._backend

    def create(self, tenant_id: str, session_id: str, *, uid: int | None = None,
               disk_bytes: int | None = None, tenant_disk_bytes: int | None = None,
               elsewhere: TenantBytes = NOTHING) -> Path:
        return self.workspaces.create(tenant_id, session_id, uid=uid, disk_bytes=disk_bytes,
                                      tenant_disk_bytes=tenant_disk_bytes, elsewhere=elsewhere)

    def tenant_bytes(self, tenant_id: str) -> TenantBytes:
        return self.workspaces.tenant_bytes(tenant_id)

    def remove(self, tenant_id: str, session_id: str) -> bool:
        return self.workspaces.remove(tenant_id, session_id)

    def verify(self, tenant_id: str, session_id: str) -> Path:
        return self.workspaces.verify(tenant_id, session_id)

    def tmp_path(self, tenant_id: str, session_id: str) -> Path:
        return self.workspaces.tmp_path(tenant_id, session_id)

    def state(self, tenant_id: str, session_id: str) -> str:
        return self.workspaces.state(tenant_id, session_id)

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace") -> Workspace:
        return self.workspaces.open(tenant_id, session_id, root=root)
