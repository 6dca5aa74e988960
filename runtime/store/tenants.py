"""A tenant's two names and the directory that maps one to the other.

`TenantId` (``t_`` + 16 hex) names a tenant in storage, audit records, paths and labels;
`TenantName` (what the operator typed, e.g. ``acme``) is what policy files match. Both are
`str` at run time (NewTypes, in `runtime.store.ids`); mypy refuses one where the other is
meant, so a quota looked up by id (it silently falls back to the defaults) no longer
type-checks.

`Tenants` holds the per-app caches of a tenant's name and sandbox uid (both stable once
known), below the API and the sessions that ask for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runtime.store.ids import TenantId, TenantName

if TYPE_CHECKING:
    from runtime.store.store import Store

__all__ = ["TenantId", "TenantName", "Tenants"]


class Tenants:
    """Tenant id -> name and sandbox uid, each read from the store once."""

    def __init__(self, store: Store, *, uid_base: int, host_passwd: Path | None) -> None:
        self.store = store
        self.uid_base = uid_base
        self.host_passwd = host_passwd
        self._names: dict[str, TenantName] = {}
        self._uids: dict[str, int] = {}

    async def name(self, tenant_id: TenantId) -> TenantName:
        """The tenant's name (its id for a tenant the store does not know)."""
        name = self._names.get(tenant_id)
        if name is None:
            tenant = await self.store.get_tenant(tenant_id)
            name = TenantName(tenant.name if tenant is not None else tenant_id)
            self._names[tenant_id] = name
        return name

    async def sandbox_uid(self, tenant_id: TenantId) -> int:
        """The uid the tenant's sandboxes run as (stable; cached once known)."""
        uid = self._uids.get(tenant_id)
        if uid is None:
            uid = await self.store.tenant_sandbox_uid(tenant_id, self.uid_base,
                                                      self.host_passwd)
            self._uids[tenant_id] = uid
        return uid
