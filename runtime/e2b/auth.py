"""Who calls `/e2b`: an API key on the control side, a per-sandbox access token on the
sandbox side.

Control calls carry a Navi token in `X-API-KEY` (the SDK's `E2B_API_KEY`); it must be live
and of a role that may run tools (an auditor's key is refused). Sandbox calls carry no key:
the SDK sends the sandbox's id (`E2b-Sandbox-Id`) and the access token Navi issued for it
(`X-Access-Token`; the code interpreter also `E2B-Traffic-Access-Token`). The token must be
one of that sandbox's, and the key it was issued to must still be live: a sandbox-side call
acts as that key (its tenant, role and token id in the audit) and stops working when the key
is revoked or expires. Another tenant's sandbox is simply not found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.api.deps import SESSION_ROLES, authenticate
from runtime.e2b.errors import SandboxGone
from runtime.e2b.store import SandboxRecord, SandboxStore, TokenKind
from runtime.errors import Forbidden, NotFound, Unauthorized
from runtime.policy.decision import Subject
from runtime.sessions.principal import Principal, subject_for
from runtime.store import SessionRecord
from runtime.store.tokens import now

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps

SANDBOX_ID_HEADER = "e2b-sandbox-id"
SANDBOX_PORT_HEADER = "e2b-sandbox-port"
ACCESS_HEADER = "x-access-token"
TRAFFIC_HEADER = "e2b-traffic-access-token"


async def api_key(services: BridgeDeps, headers: Mapping[str, str]) -> Principal:
    key = headers.get("x-api-key")
    if not key:
        scheme, _, value = (headers.get("authorization") or "").partition(" ")
        key = value.strip() if scheme.lower() == "bearer" else None
    if not key:
        raise Unauthorized("missing API key: set E2B_API_KEY to a Navi token")
    principal = await authenticate(services, key.strip())
    if principal.role not in SESSION_ROLES:
        raise Forbidden(f"a token of role {principal.role!r} may not use sandboxes "
                        f"(roles that may: {', '.join(SESSION_ROLES)})")
    return principal


@dataclass(frozen=True)
class SandboxCaller:
    """A sandbox-side request, authenticated: the acting key, the session, the sandbox."""

    services: BridgeDeps
    principal: Principal
    session: SessionRecord
    sandbox: SandboxRecord

    async def subject(self) -> Subject:
        return await subject_for(self.services, self.principal, self.session)


async def sandbox_caller(services: BridgeDeps, headers: Mapping[str, str],
                         kinds: tuple[TokenKind, ...] = ("envd",)) -> SandboxCaller:
    sandbox_id = headers.get(SANDBOX_ID_HEADER, "")
    if not sandbox_id or len(sandbox_id) > 64:
        raise NotFound("no sandbox named: the E2b-Sandbox-Id header is missing")
    store = SandboxStore(services.store)
    grant = None
    for header, kind in ((ACCESS_HEADER, "envd"), (TRAFFIC_HEADER, "traffic")):
        token = headers.get(header)
        if kind in kinds and token:
            grant = await store.grant(token)
            if grant is not None and grant.kind == kind:
                break
            grant = None
    if grant is None or grant.session_id != sandbox_id:
        raise Unauthorized("missing or invalid sandbox access token (the envdAccessToken "
                           "Navi issued for this sandbox is required)")
    gone = SandboxGone(f"sandbox {sandbox_id} was not found: it was killed or timed out")
    key = await services.store.get_token(grant.key_id)
    if key is None or key.revoked_at is not None or (
            key.expires_at is not None and key.expires_at <= now()):
        raise Unauthorized("the API key that created or connected this sandbox was revoked "
                           "or has expired")
    principal = Principal(token_id=key.id, tenant_id=key.tenant_id, role=key.role,
                          expires_at=key.expires_at)
    sandbox = await store.get(key.tenant_id, sandbox_id)
    session = await services.store.get_session(key.tenant_id, sandbox_id)
    if sandbox is None or session is None:
        raise gone
    return SandboxCaller(services=services, principal=principal, session=session,
                         sandbox=sandbox)
