"""Which Navi session an MCP request works in.

An MCP connection (its `Mcp-Session-Id`) gets a Navi session of its own, opened on its first
call (the same path as `POST /v1/sessions`: quota, audit), or the session its client names
with `X-Navi-Session` (one of the token's tenant's; anything else is "no such session").
Requests without an MCP session id (the stateless protocol era) share one session per token.
The mapping lives as long as the server; the sessions stay (their files are the work) and
are listed and deleted like any other.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from runtime.api.deps import owned_session
from runtime.sessions.lifecycle import open_session
from runtime.sessions.principal import Principal
from runtime.store import SessionRecord

if TYPE_CHECKING:
    from runtime.api.mcp.deps import McpDeps

NAVI_SESSION_HEADER = "x-navi-session"
MCP_SESSION_HEADER = "mcp-session-id"
MAX_REMEMBERED = 10_000


class McpSessions:
    def __init__(self) -> None:
        self._opened: dict[tuple[str, str], str] = {}
        self._lock = asyncio.Lock()

    async def find(self, services: McpDeps, principal: Principal,
                   headers: dict[str, str]) -> SessionRecord | None:
        """The session a request names or already has; None if it has none yet."""
        named = headers.get(NAVI_SESSION_HEADER)
        if named:
            return await owned_session(services, principal, named)
        opened = self._opened.get(self._key(principal, headers))
        if opened is None:
            return None
        return await services.store.get_session(principal.tenant_id, opened)

    async def get(self, services: McpDeps, principal: Principal,
                  headers: dict[str, str]) -> SessionRecord:
        """The request's session, opened now if its connection has none."""
        found = await self.find(services, principal, headers)
        if found is not None:
            return found
        async with self._lock:
            found = await self.find(services, principal, headers)
            if found is not None:
                return found
            record = await open_session(services, principal, title="MCP connection")
            if len(self._opened) >= MAX_REMEMBERED:
                self._opened.pop(next(iter(self._opened)))
            self._opened[self._key(principal, headers)] = record.id
            return record

    @staticmethod
    def _key(principal: Principal, headers: dict[str, str]) -> tuple[str, str]:
        return principal.token_id, headers.get(MCP_SESSION_HEADER) or "-"
