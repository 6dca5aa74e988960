"""The ASGI endpoint at `/mcp`: Navi's bearer tokens in front of the SDK's streamable HTTP
transport.

Every request is authenticated before the SDK sees it (no token, a bad, expired or revoked
token: 401 with the API's error envelope; a role that may not run tools: 403). The SDK binds
an MCP session to the token that opened it (another token gets 404 for it). DNS-rebinding
protection is off: a browser page cannot attach a bearer token without the client's help.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from runtime.api.deps import SESSION_ROLES, authenticate, bearer_token
from runtime.api.errors import error_response, status_for
from runtime.api.mcp.handlers import PRINCIPAL_KEY, build_server
from runtime.api.mcp.sessions import McpSessions
from runtime.errors import Forbidden, NaviError, QuotaExceeded

if TYPE_CHECKING:
    from runtime.api.mcp.deps import McpDeps

IDLE_TIMEOUT_S = 30 * 60
# Open MCP sessions (each ~40 KiB of transport state, kept up to IDLE_TIMEOUT_S idle): the
# SDK's own cap is for the whole server, so one tenant opening sessions in a loop would
# take every slot from the others; past this many of its own a tenant gets 429.
MAX_SESSIONS_PER_TENANT = 100
MCP_SESSION_HEADER = "mcp-session-id"
MAX_BODY_BYTES = 12 * 1024 * 1024  # as the REST API's JSON bodies


class McpEndpoint:
    def __init__(self, services_of: Callable[[], McpDeps]) -> None:
        self._services_of = services_of
        self.sessions = McpSessions()
        self.server = build_server(services_of, self.sessions)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            session_idle_timeout=IDLE_TIMEOUT_S,
            max_request_body_size=MAX_BODY_BYTES,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The transport's task group, for the app's lifespan. It lives in a task of its own:
        a lifespan may be entered and left in different tasks (test clients do), an anyio
        task group may not."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold(), name="navi-mcp-transport")
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiting.cancel()
            task.result()  # its start-up error
        try:
            yield
        finally:
            stop.set()
            await task

    def open_sessions(self, tenant_id: str) -> int:
        """The tenant's open MCP sessions (the SDK's table of session owners)."""
        owners = getattr(self.manager, "_session_owners", {})
        return sum(1 for owner in owners.values() if owner.get("subject") == tenant_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            principal = await authenticate(self._services_of(),
                                           bearer_token(headers.get("authorization")))
            if principal.role not in SESSION_ROLES:
                raise Forbidden(f"this needs one of the roles: {', '.join(SESSION_ROLES)}")
            if MCP_SESSION_HEADER not in headers and \
                    self.open_sessions(principal.tenant_id) >= MAX_SESSIONS_PER_TENANT:
                raise QuotaExceeded(
                    f"this tenant has {MAX_SESSIONS_PER_TENANT} open MCP sessions; end one "
                    "(DELETE /mcp with its Mcp-Session-Id) or wait for one to expire",
                    retry_after=60)
        except NaviError as exc:
            await error_response(status_for(exc), exc.code, exc.message,
                                 **exc.details)(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        # the SDK binds a session to (client_id, issuer, subject): the token; the subject
        # (the tenant) is what `open_sessions` counts
        scope["user"] = AuthenticatedUser(AccessToken(
            token=principal.token_id, client_id=principal.token_id, scopes=[],
            subject=principal.tenant_id))
        # a stream (GET, or a POST answered as SSE) ends when the token is revoked or
        # expires: the request is abandoned, the next one gets 401
        handling = asyncio.ensure_future(self.manager.handle_request(scope, receive, send))
        revoked = asyncio.ensure_future(self._services_of().token_ended(principal))
        try:
            await asyncio.wait({handling, revoked}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (handling, revoked):
                task.cancel()
            await asyncio.gather(revoked, return_exceptions=True)
            with contextlib.suppress(asyncio.CancelledError):
                await handling
