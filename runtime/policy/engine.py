"""The one decision point: ``PolicyEngine.decide(subject, action) -> Decision``. Pure, no I/O.

Order of evaluation (the first rule that matches decides; its id goes into the Decision):

1. the role may run tools at all              deny ``roles.<role>.run_tools``
2. the tenant is assigned (by name, else `*`)   deny ``default.deny``
3. the session's profile is one of the tenant's deny ``tenants.<t>.profiles``
4. the role may use that profile               deny ``profiles.<p>.roles``
5. profile deny list, then tenant overlay deny  deny ``profiles.<p>.deny[<entry>]``,
                                                     ``tenants.<t>.deny[<entry>]``
6. profile allow list (else deny by default)    deny ``default.deny``
7. tenant overlay allow list (when given)       deny ``tenants.<t>.allow``
8. argument constraints (code_exec languages)   deny ``profiles.<p>.tools.code_exec.languages``
9. approvals (profile, then overlays)           ask  ``profiles.<p>.approvals[<i>]``
10.                                             allow ``profiles.<p>.allow[<entry>]``

So an explicit deny always beats an allow, and anything unnamed is denied. Tenant overlays
(the tenant's entry in the server policy, and any overlay added with ``with_overlay``) only
add denies and approvals, intersect allow and egress lists and lower limits: they can never
widen what the server policy grants.

The server's own subject (``SERVER_TENANT``, ``server_subject()``) is decided apart: it may
only list a declared MCP server's tools (allow ``mcp_servers.<name>``), under the defaults.

Secrets follow code, not names: a user tool's grant only with a matching `tool_hash`, an MCP
server's tool only as that server's call, a built-in never (the loader refuses such files).

Limits: ``Limits`` defaults -> `defaults.limits` -> profile `limits` -> per-tool `limits` (the
server policy is the admin's: it may raise within the hard bounds of ``Limits``); overlays
then take the minimum. A requested ``timeout_s`` is clamped to `max_timeout_s` (300 unless
lowered) and the Decision's ``limits.timeout_s`` is the timeout to use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from runtime.policy.decision import SERVER_TENANT, Action, Decision, Role, Subject
from runtime.policy.egress_grant import first_refusal
from runtime.policy.loader import load_policy
from runtime.policy.model import (
    BUILTIN_TOOLS,
    MCP_GROUP,
    MCP_SEPARATOR,
    TOOL_GROUP,
    TOOL_NAME,
    USER_TOOLS_GROUP,
    ApprovalRule,
    Approvers,
    LimitsSpec,
    PolicyFile,
    Quotas,
    QuotasSpec,
    TenantOverlay,
    TenantRule,
    ToolRule,
)
from runtime.policy.plan_mode import RULE as PLAN_RULE
from runtime.policy.plan_mode import changes_nothing
from runtime.policy.session_limits import SessionLimits
from runtime.policy.session_limits import resolve as resolve_session_limits
from runtime.sandbox.models import Limits
from runtime.store.ids import TenantName

Permission = Literal["run_tools", "read_audit", "manage"]
RULE_OF = {"process_start": "terminal", "kernel_exec": "code_exec"}
"""Tools without a rule of their own run under another's (image, limits, egress)."""
DEFAULT_MAX_TIMEOUT_S = 300.0


SESSION_KEYS = frozenset({"processes", "ports"})
"""Limits of a session's background work, not of one call (``runtime.policy.session_limits``)."""


def _spec(spec: LimitsSpec) -> dict[str, float | int | str]:
    return {k: v for k, v in spec.model_dump(exclude=set(SESSION_KEYS)).items()
            if v is not None}


def _quota_spec(spec: QuotasSpec) -> dict[str, int]:
    return {k: v for k, v in spec.model_dump().items() if v is not None}


class PolicyEngine:
    """Decides tool calls against one server policy plus optional per-tenant overlays."""

    def __init__(
        self, policy: PolicyFile, overlays: Mapping[str, TenantOverlay] | None = None
    ) -> None:
        self.policy = policy
        self._overlays = dict(overlays or {})
        base: dict[str, float | int | str] = dict(Limits().model_dump())
        base["max_timeout_s"] = DEFAULT_MAX_TIMEOUT_S
        base.update(_spec(policy.defaults.limits))
        self._base_limits = base
        self._default_quotas = Quotas(**{**Quotas().model_dump(),
                                         **_quota_spec(policy.defaults.quotas)})

    @classmethod
    def from_file(cls, path: Path) -> PolicyEngine:
        return cls(load_policy(path))

    def with_overlay(self, tenant: TenantName, overlay: TenantOverlay) -> PolicyEngine:
        """A new engine where `tenant` also carries `overlay` (which can only tighten)."""
        return PolicyEngine(self.policy, {**self._overlays, tenant: overlay})

    # -- lookups --------------------------------------------------------------------------

    def tenant_rule(self, tenant: TenantName) -> tuple[str, TenantRule] | None:
        rule = self.policy.tenants.get(tenant)
        if rule is not None:
            return tenant, rule
        star = self.policy.tenants.get("*")
        return ("*", star) if star is not None else None

    def default_profile(self, tenant: TenantName) -> str | None:
        found = self.tenant_rule(tenant)
        if found is None:
            return None
        rule = found[1]
        if rule.default_profile:
            return rule.default_profile
        return "developer" if "developer" in rule.profiles else rule.profiles[0]

    def permits(self, role: Role, permission: Permission) -> bool:
        rule = self.policy.roles.get(role)
        return bool(rule is not None and getattr(rule, permission))

    def quotas(self, tenant: TenantName) -> Quotas:
        """Server `defaults.quotas`, replaced by the tenant's entry, lowered by any overlay."""
        if tenant == SERVER_TENANT:  # the server's own runs: `defaults.quotas`, a bucket apart
            return self._default_quotas
        values = self._default_quotas.model_dump()
        found = self.tenant_rule(tenant)
        if found is not None:
            values.update(_quota_spec(found[1].quotas))
        overlay = self._overlays.get(tenant)
        if overlay is not None:
            for key, value in _quota_spec(overlay.quotas).items():
                values[key] = min(values[key], value)
        return Quotas(**values)

    def session_limits(self, subject: Subject) -> SessionLimits:
        """``limits.processes`` and ``limits.ports`` of the subject's profile, lowered by
        its tenant's entry and overlay."""
        overlays: list[tuple[str, TenantOverlay]] = []
        found = self.tenant_rule(subject.policy_tenant)
        if found is not None:
            overlays.append((f"tenants.{found[0]}", found[1]))
        extra = self._overlays.get(subject.policy_tenant)
        if extra is not None:
            overlays.append((f"overlays.{subject.policy_tenant}", extra))
        return resolve_session_limits(self.policy, subject, overlays)

    @staticmethod
    def tool_group(tool: str, declared_group: str | None = None) -> str | None:
        """Built-in tools have a fixed group; any other tool can only be a user tool."""
        if tool in TOOL_GROUP:
            return TOOL_GROUP[tool]
        if declared_group in ("user_tools", USER_TOOLS_GROUP):
            return USER_TOOLS_GROUP
        if declared_group == MCP_GROUP and MCP_SEPARATOR in tool:
            return MCP_GROUP
        return None

    # -- the decision -----------------------------------------------------------------------

    def decide(self, subject: Subject, action: Action) -> Decision:
        if subject.tenant == SERVER_TENANT:
            return self._decide_for_server(action)
        tool = action.tool
        role = self.policy.roles.get(subject.role)
        if role is None or not role.run_tools:
            return _deny(f"roles.{subject.role}.run_tools",
                         f"role {subject.role!r} may not run tools")
        found = self.tenant_rule(subject.policy_tenant)
        if found is None:
            return _deny("default.deny",
                         f"tenant {subject.policy_tenant!r} is not assigned by the policy")
        tkey, trule = found
        if subject.profile not in trule.profiles:
            return _deny(f"tenants.{tkey}.profiles", f"profile {subject.profile!r} is not "
                         f"assigned to tenant {subject.policy_tenant!r}")
        profile = self.policy.profiles.get(subject.profile)
        if profile is None:
            return _deny("default.deny", f"no profile {subject.profile!r}")
        if subject.role not in profile.roles:
            return _deny(f"profiles.{subject.profile}.roles",
                         f"role {subject.role!r} may not use profile {subject.profile!r}")
        if not TOOL_NAME.fullmatch(tool):
            return _deny("default.deny", "not a tool name")
        if subject.plan_mode and not changes_nothing(action):
            return _deny(PLAN_RULE, f"{tool!r} may change something, and the agent is in plan "
                         "mode: only reads, searches and questions run until its plan is "
                         "approved (exit_plan_mode)")
        group = self.tool_group(tool, action.group)
        mcp_server = None
        if group == MCP_GROUP:
            mcp_server = self.policy.mcp_servers.get(tool.split(MCP_SEPARATOR, 1)[0])
            if mcp_server is None:
                return _deny("mcp_servers", f"{tool!r}: no MCP server of that name is declared")
        ppath = f"profiles.{subject.profile}"
        overlays: list[tuple[str, TenantOverlay]] = [(f"tenants.{tkey}", trule)]
        extra = self._overlays.get(subject.policy_tenant)
        if extra is not None:
            overlays.append((f"overlays.{subject.policy_tenant}", extra))

        hit = _match(profile.deny, tool, group)
        if hit:
            return _deny(f"{ppath}.deny[{hit}]",
                         f"{tool!r} is denied by profile {subject.profile!r}")
        for prefix, overlay in overlays:
            hit = _match(overlay.deny, tool, group)
            if hit:
                return _deny(f"{prefix}.deny[{hit}]", f"{tool!r} is denied for this tenant")
        allowed_by = _match(profile.allow, tool, group) or _lists_for(profile.allow, tool, group)
        if not allowed_by:
            return _deny("default.deny",
                         f"{tool!r} is not named by profile {subject.profile!r} (deny by default)")
        for prefix, overlay in overlays:
            if overlay.allow is not None and not (_match(overlay.allow, tool, group)
                                                  or _lists_for(overlay.allow, tool, group)):
                return _deny(f"{prefix}.allow", f"{tool!r} is not in this tenant's allow list")
        tool_rule = profile.tools.get(tool)
        if tool_rule is None and tool in RULE_OF:  # a process runs under terminal's rule
            tool_rule = profile.tools.get(RULE_OF[tool])
        if tool == "code_exec" and tool_rule is not None and tool_rule.languages is not None:
            language = action.args.get("language")
            if language not in tool_rule.languages:
                return _deny(f"{ppath}.tools.code_exec.languages",
                             f"language {language!r} is not allowed by profile "
                             f"{subject.profile!r}")

        group_rule = profile.tools.get(group) if group else None  # e.g. group:user_tools
        limits = self._limits(profile.limits,
                              [r.limits for r in (group_rule, tool_rule) if r is not None],
                              [o.limits for _, o in overlays], action.timeout_s)
        if action.args.get("user") == "root" and tool == "terminal" and not limits.allow_root:
            return _deny(f"{ppath}.limits.allow_root", "running as root needs a profile or "
                         "tool rule with allow_root: true under runtime: gvisor")
        image = (tool_rule.image if tool_rule and tool_rule.image else None) \
            or self.policy.images.get(tool) or self.policy.images.get(RULE_OF.get(tool, "")) \
            or (self.policy.images.get(group) if group else None)
        egress: list[str] = []
        if mcp_server is not None:  # the server's own image and hosts, whatever else says
            image = mcp_server.image
            egress = [h for h in mcp_server.egress if h in self.policy.network.egress_allowlist]
        elif tool_rule is not None and tool_rule.network == "egress":
            egress = [h for h in tool_rule.egress if h in self.policy.network.egress_allowlist]
        if egress:
            for _, overlay in overlays:
                if overlay.egress is not None:
                    egress = [h for h in egress if h in overlay.egress]
        refusal = first_refusal(action.hosts, egress) if action.hosts else None
        if refusal is not None:  # a host outside the grant: nothing to ask about, no start
            return _deny(f"{ppath}.tools.{tool}.egress", refusal)
        secrets = _granted_secrets(tool, group, tool_rule, action)
        common = {"limits": limits, "image": image, "secrets": secrets, **_ssh(tool, tool_rule),
                  "network": "egress" if egress else "none", "egress_allowlist": egress}

        approvals: list[tuple[str, Iterable[ApprovalRule]]] = [(ppath, profile.approvals)]
        approvals += [(prefix, o.approvals) for prefix, o in overlays]
        for prefix, rules in approvals:
            for i, rule in enumerate(rules):
                if _match(rule.tools, tool, group) and _triggers(rule, action):
                    approvers, self_ok = _answerers(self.policy.approvals, rule,
                                                    narrow=prefix.startswith("overlays."))
                    return Decision(verdict="ask", rule=f"{prefix}.approvals[{i}]",
                                    reason=_ask_reason(rule, tool), approvers=approvers,
                                    self_approve=self_ok, **common)
        return Decision(verdict="allow", rule=f"{ppath}.allow[{allowed_by}]",
                        reason=f"{tool!r} is allowed by profile {subject.profile!r}", **common)

    def _decide_for_server(self, action: Action) -> Decision:
        """The server's own run: listing a declared MCP server's tools (tool `NAME__`), in its
        image with its hosts, under `defaults.limits`; no secrets, nothing else."""
        name = action.tool.removesuffix(MCP_SEPARATOR)
        server = self.policy.mcp_servers.get(name) if (
            action.group == MCP_GROUP and action.tool.endswith(MCP_SEPARATOR)) else None
        if server is None:
            return _deny("default.deny", "the server's own runs are MCP servers' listings only")
        egress = [h for h in server.egress if h in self.policy.network.egress_allowlist]
        return Decision(
            verdict="allow", rule=f"mcp_servers.{name}",
            reason=f"listing the tools of MCP server {name!r} for every tenant",
            limits=self._limits(LimitsSpec(), [], [], action.timeout_s), image=server.image,
            network="egress" if egress else "none", egress_allowlist=egress)

    def _limits(
        self, profile: LimitsSpec, tools: list[LimitsSpec], overlays: list[LimitsSpec],
        requested: float | None,
    ) -> Limits:
        """Defaults, then the profile's, its group rule's and its tool rule's; overlays only
        lower numbers and only move the runtime to gvisor."""
        values = dict(self._base_limits)
        values.update(_spec(profile))
        for tool in tools:
            values.update(_spec(tool))
        for overlay in overlays:
            for key, value in _spec(overlay).items():
                if key == "runtime":
                    values[key] = "gvisor" if "gvisor" in (values[key], value) else "runc"
                else:
                    values[key] = min(values[key], value)
        ceiling = float(values.pop("max_timeout_s"))
        default = float(values["timeout_s"])
        wanted = requested if requested is not None and math.isfinite(requested) \
            and requested > 0 else default
        values["timeout_s"] = min(wanted, ceiling)
        if values["runtime"] != "gvisor":  # a tool rule back on runc: never root there
            values["allow_root"] = False
        return Limits(**values)


def _granted_secrets(tool: str, group: str | None, rule: ToolRule | None,
                     action: Action) -> dict[str, str]:
    """Secrets follow code, not names: a user tool gets them only as the file its rule pins
    (`tool_hash`), an MCP server's tool only as that server's call, a built-in never."""
    if rule is None or not rule.secrets or tool in BUILTIN_TOOLS:
        return {}
    if group == MCP_GROUP:  # the declared server itself (checked above); a hash, if given
        pinned = rule.tool_hash is None or rule.tool_hash == action.tool_hash
    else:  # a changed (or another tenant's, or a same-named) tool gets nothing
        pinned = rule.tool_hash is not None and rule.tool_hash == action.tool_hash
    return dict(rule.secrets) if pinned else {}


def _ssh(tool: str, rule: ToolRule | None) -> dict[str, Any]:
    """`ssh_exec`'s key (by name; the Recorder puts its value ahead of stdin, for the fixed
    ssh driver only) and pinned host keys; any other tool, even one named in a rule, none."""
    if tool != "ssh_exec" or rule is None or rule.ssh is None:
        return {}
    return {"stdin_secret": rule.ssh.key_secret, "ssh_user": rule.ssh.user,
            "known_hosts": tuple(rule.ssh.known_hosts)}


def _deny(rule: str, reason: str) -> Decision:
    return Decision(verdict="deny", rule=rule, reason=reason)


def _match(refs: Iterable[str], tool: str, group: str | None) -> str | None:
    for ref in refs:
        if ref == tool or (group is not None and ref == group):
            return ref
    return None


def _lists_for(refs: Iterable[str], tool: str, group: str | None) -> str | None:
    """Listing an MCP server's tools (tool `NAME__`) is allowed where one of them is."""
    if group != MCP_GROUP or not tool.endswith(MCP_SEPARATOR):
        return None
    return next((ref for ref in refs if ref.startswith(tool)), None)


def _triggers(rule: ApprovalRule, action: Action) -> bool:
    if rule.when == "always":
        return True
    if rule.when == "first_use":
        return action.first_use
    # hash_change: no hash, or not the hash this tenant approved last -> ask (fail closed)
    return action.tool_hash is None or action.tool_hash != action.approved_hash


def _answerers(default: Approvers, rule: ApprovalRule, narrow: bool) -> tuple[list[Role], bool]:
    """Who may answer an ask of `rule`: the rule's own say, else the policy's `approvals`.
    A tenant's own overlay (`narrow`) can only narrow the policy's."""
    approvers = default.approvers if rule.approvers is None else rule.approvers
    self_ok = default.self_approve if rule.self_approve is None else rule.self_approve
    if narrow:
        approvers = [r for r in approvers if r in default.approvers]
        self_ok = self_ok and default.self_approve
    return approvers, self_ok


def _ask_reason(rule: ApprovalRule, tool: str) -> str:
    return {
        "always": f"{tool!r} always needs approval",
        "first_use": f"first use of {tool!r} needs approval",
        "hash_change": f"{tool!r} changed since it was last approved",
    }[rule.when]
