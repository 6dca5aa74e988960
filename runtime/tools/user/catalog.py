"""Per-tenant snapshots of user tools: what `reload_tools` loaded is what runs until the next one.

A snapshot is taken lazily on a tenant's first use and replaced by `reload`. `write_tool`
puts the one tool it wrote into the snapshot (`refresh`), so the agent can call it by its
name at once (small models stumble over a separate reload step); `delete_tool` drops it.
Other changes of files on disk are seen only after `reload_tools`. Created by the app
factory; holds no global state.
"""

from __future__ import annotations

import asyncio

from runtime.errors import NaviError
from runtime.logging import get_logger
from runtime.tools.user.store import ToolCatalog, UserToolStore

log = get_logger(__name__)


class UserToolCatalogs:
    def __init__(self, store: UserToolStore) -> None:
        self.store = store
        self._snapshots: dict[str, ToolCatalog] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, tenant: str) -> asyncio.Lock:
        return self._locks.setdefault(tenant, asyncio.Lock())

    async def get(self, tenant: str) -> ToolCatalog:
        snapshot = self._snapshots.get(tenant)
        if snapshot is not None:
            return snapshot
        async with self._lock(tenant):
            snapshot = self._snapshots.get(tenant)
            if snapshot is None:
                snapshot = await self._scan(tenant)
        return snapshot

    async def reload(self, tenant: str) -> ToolCatalog:
        async with self._lock(tenant):
            return await self._scan(tenant)

    async def _scan(self, tenant: str) -> ToolCatalog:
        snapshot = await asyncio.to_thread(self.store.scan, tenant)
        self._snapshots[tenant] = snapshot
        if snapshot.errors:
            log.info("user_tools_load_errors", tenant=tenant, broken=sorted(snapshot.errors))
        return snapshot

    async def refresh(self, tenant: str, name: str) -> None:
        """Load one tool fresh from disk into the tenant's snapshot (after `write_tool`);
        a tool that does not load is recorded as the snapshot's error for that name."""
        async with self._lock(tenant):
            snapshot = self._snapshots.get(tenant)
            if snapshot is None:
                await self._scan(tenant)
                return
            tools = dict(snapshot.tools)
            errors = dict(snapshot.errors)
            try:
                tools[name] = await asyncio.to_thread(self.store.load, tenant, name)
                errors.pop(name, None)
            except NaviError as exc:
                tools.pop(name, None)
                errors[name] = exc.message
            self._snapshots[tenant] = snapshot.model_copy(update={"tools": tools,
                                                                  "errors": errors})

    async def drop(self, tenant: str, name: str) -> None:
        """Forget one tool from the tenant's snapshot at once (after `delete_tool`)."""
        async with self._lock(tenant):
            snapshot = self._snapshots.get(tenant)
            if snapshot is not None and name in snapshot.tools:
                tools = {k: v for k, v in snapshot.tools.items() if k != name}
                self._snapshots[tenant] = snapshot.model_copy(update={"tools": tools})
