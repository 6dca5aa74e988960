"""Who makes a request (`Principal`: the token's id, tenant and role) and the policy subject
a call of theirs gets (`subject_for`).

Not in `runtime.api.deps`: the API's dependencies, the token watch, the sessions service and
the MCP endpoint all use it, and the API layer imported from itself in a circle for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.policy.decision import Subject
from runtime.store import Role, SessionRecord
from runtime.store.ids import TenantId

if TYPE_CHECKING:
    from runtime.sessions.deps import SubjectDeps


@dataclass(frozen=True)
class Principal:
    token_id: str
    tenant_id: TenantId
    role: Role
    expires_at: float | None = None  # Unix time; a stream opened with the token ends then


async def subject_for(services: SubjectDeps, principal: Principal, session: SessionRecord | None,
                      profile: str | None = None) -> Subject:
    """The policy subject of a call: tenant (id and, for policy matching, name), role, token,
    and the session with its profile (or the tenant's default profile outside a session)
    and its node."""
    tenant_name = await services.tenants.name(principal.tenant_id)
    chosen = (session.profile if session is not None else profile) or (
        services.policy.default_profile(tenant_name) or "developer")
    return Subject(tenant=principal.tenant_id, tenant_name=tenant_name, role=principal.role,
                   user=principal.token_id, profile=chosen,
                   session=session.id if session is not None else "none",
                   node=session.node if session is not None else "local",
                   sandbox_uid=await services.tenants.sandbox_uid(principal.tenant_id))
