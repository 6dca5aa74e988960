"""What the policy engine is asked (Subject, Action) and what it answers (Decision)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.sandbox.models import Limits
from runtime.store.ids import TenantId, TenantName

Role = Literal["admin", "tenant_admin", "user", "auditor"]
Verdict = Literal["allow", "deny", "ask"]


class Subject(BaseModel):
    """Who asks: the tenant, the token's role and id, the session and its profile."""

    model_config = ConfigDict(frozen=True)

    tenant: TenantId = Field(description="tenant id (storage, audit, labels)")
    tenant_name: TenantName | None = Field(None, description="tenant name, what policy files match")
    role: Role = "user"
    user: str = "local"
    profile: str = "developer"
    session: str = "local"
    sandbox_uid: int | None = Field(None, ge=1, description="the tenant's sandbox uid "
                                    "(None: the server's default, for runs of no tenant)")
    agent_depth: int = Field(0, ge=0, description="0: a caller or a top-level agent; a "
                             "sub-agent (spawn_agent) is one deeper than its parent")
    parent_turn: str | None = Field(None, description="a sub-agent's parent turn (audited)")
    agent_id: str | None = Field(None, description="a sub-agent's own id: its todo and "
                                 "scratchpad are its own (`runtime.tools.notes_store`)")
    node: str = Field("local", description="the cluster node the session lives on (audited)")
    plan_mode: bool = Field(False, description="the agent plans: only calls that change "
                            "nothing may run (`runtime.policy.plan_mode`)")

    @property
    def policy_tenant(self) -> TenantName:
        """The key policy files use for tenants: the name when known, else the id."""
        return self.tenant_name or TenantName(self.tenant)


SERVER_TENANT = "_server"
"""The server's own runs (an MCP server's tool listing, shared by every tenant): no tenant's
uid, cgroup, quotas or secrets. Not a tenant id or name (those start alphanumeric)."""


def server_subject() -> Subject:
    """Who runs what the server does for all tenants: the policy's defaults, nothing more."""
    return Subject(tenant=SERVER_TENANT, role="admin", user="navi", profile="none",
                   session="none")


class Action(BaseModel):
    """What is asked for: a tool call with its arguments and, where it runs code, its needs."""

    model_config = ConfigDict(frozen=True)

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    group: str | None = None
    timeout_s: float | None = None
    tool_hash: str | None = Field(None, description="content hash of a user tool file")
    first_use: bool = False
    approved_hash: str | None = Field(
        None, description="the tool_hash this tenant last approved (for `ask: hash_change`)"
    )
    hosts: tuple[str, ...] = Field(
        (), description="hosts the call's arguments name (a URL's host): each must be in the "
        "decision's egress grant, else the call is denied by `<profile>.tools.<tool>.egress`")


class Decision(BaseModel):
    """The engine's answer; `rule` names the policy rule that decided, for the audit and the 403."""

    model_config = ConfigDict(frozen=True)

    verdict: Verdict
    rule: str
    reason: str
    limits: Limits = Field(default_factory=Limits)
    image: str | None = None
    network: Literal["none"] | str = "none"
    egress_allowlist: list[str] = Field(default_factory=list)
    secrets: dict[str, str] = Field(
        default_factory=dict, description="ENV_VAR: secret name granted to this call")
    stdin_secret: str | None = Field(
        None, description="ssh_exec: the secret (a name) put ahead of the call's stdin")
    ssh_user: str | None = None
    known_hosts: tuple[str, ...] = Field((), description="ssh_exec: the pinned host keys")
    approvers: list[Role] = Field(
        default_factory=list, description="ask: the roles that may answer (policy `approvals`)")
    self_approve: bool = Field(
        False, description="ask: whether the token that asked may answer its own request")

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"
