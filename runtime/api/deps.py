"""Request dependencies: the app's services, the caller's identity, role checks, tenant scoping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Protocol

import structlog
from fastapi import Depends, Request

from runtime.errors import Forbidden, NotFound, Unauthorized
from runtime.policy.decision import Subject
from runtime.sessions.principal import Principal
from runtime.sessions.principal import subject_for as subject_for  # its old home
from runtime.store import Role, SessionRecord, Store

if TYPE_CHECKING:
    from runtime.api.services import Services


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated["Services", Depends(get_services)]


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class StoreDeps(Protocol):
    """What authenticating a token and scoping a session to its tenant need: the store."""

    @property
    def store(self) -> Store: ...


async def authenticate(services: StoreDeps, token: str | None) -> Principal:
    if token is None:
        raise Unauthorized("missing bearer token")
    record = await services.store.authenticate(token)
    if record is None:
        raise Unauthorized("invalid or revoked token")
    structlog.contextvars.bind_contextvars(tenant=record.tenant_id, token=record.id)
    return Principal(token_id=record.id, tenant_id=record.tenant_id, role=record.role,
                     expires_at=record.expires_at)


async def get_principal(request: Request) -> Principal:
    services = get_services(request)
    return await authenticate(services, bearer_token(request.headers.get("authorization")))


def require(*roles: Role) -> Any:  # a `Depends(...)` marker for `Annotated`
    async def dependency(request: Request) -> Principal:
        principal = await get_principal(request)
        if principal.role not in roles:
            raise Forbidden(f"this needs one of the roles: {', '.join(roles)}")
        return principal

    return Depends(dependency)


# Who may do what. `admin` is the server operator (its tokens exist only in the operator
# tenant): tenants, any tenant's tokens and audit, policies, metrics, and work in its own
# tenant. `tenant_admin` manages its own tenant only (tokens, sessions, audit): another
# tenant's resources are 404 to it. `user` works with sessions; `auditor` only reads the
# audit (and metrics).
SESSION_ROLES: tuple[Role, ...] = ("user", "tenant_admin", "admin")
SessionUser = Annotated[Principal, require(*SESSION_ROLES)]
AuditReader = Annotated[Principal, require("auditor", "tenant_admin", "admin")]
TenantManager = Annotated[Principal, require("tenant_admin", "admin")]
Admin = Annotated[Principal, require("admin")]


def check_manages(services: Services, principal: Principal, tenant_id: str) -> str:
    """The tenant a manager may act on: an admin any, a tenant_admin only its own (another
    tenant is a plain 404). The policy's `roles.<role>.manage` must allow it (403 naming the
    rule). Returns the rule that decided, for the audit."""
    if principal.role != "admin" and tenant_id != principal.tenant_id:
        raise NotFound("no such tenant")
    rule = f"roles.{principal.role}.manage"
    if not services.policy.permits(principal.role, "manage"):
        raise Forbidden(f"the policy does not let role {principal.role!r} manage tenants "
                        f"({rule})")
    return rule


def actor(principal: Principal, tenant_id: str, session: str = "none") -> Subject:
    """The subject of a state change the caller makes in `tenant_id` (for the audit)."""
    return Subject(tenant=tenant_id, role=principal.role, user=principal.token_id,
                   session=session)


async def owned_session(services: StoreDeps, principal: Principal, session_id: str
                        ) -> SessionRecord:
    """The session if it belongs to the caller's tenant; anything else is a plain 404."""
    record = await services.store.get_session(principal.tenant_id, session_id)
    if record is None:
        raise NotFound("no such session")
    structlog.contextvars.bind_contextvars(session=record.id)
    return record



async def _session_of_caller(session_id: str, request: Request, principal: SessionUser
                             ) -> SessionRecord:
    return await owned_session(get_services(request), principal, session_id)


# Resolved before a (streaming) response starts, so a foreign session is a real 404.
CallerSession = Annotated[SessionRecord, Depends(_session_of_caller)]


async def _change_allowed(request: Request, principal: SessionUser) -> None:
    """Hold the caller's state change to its tenant's change rate (429 ``change_rate``,
    recorded as a refusal); for routes whose change is not recorded by ``record_action``."""
    session = request.path_params.get("session_id", "none")
    route = getattr(request.scope.get("route"), "path", request.url.path)
    await get_services(request).executor.meter_change(
        actor(principal, principal.tenant_id, str(session)), f"{request.method} {route}")


# A route parameter `_: ChangeAllowed` meters the route's change (once per request).
ChangeAllowed = Annotated[None, Depends(_change_allowed)]
