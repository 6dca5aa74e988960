"""The shape of a policy file (`policies/*.yaml`), validated strictly: an unknown key is an error.

A policy names profiles (tool allow/deny lists, approvals, per-tool limits), the images
tools run in, the egress allowlist, what each role may do, and which tenants may use which
profiles under which quotas. A tenant entry may also carry an *overlay* (allow/deny/
approvals/limits/egress/quotas) that can only tighten what the server policy grants.

Structure (every key optional unless noted)::

    version: 1                      # required
    defaults: {limits: {...}, quotas: {...}}
    images: {code_exec: python, "group:cad": openscad, ...}
    network: {egress_allowlist: [pypi.org]}
    roles: {user: {run_tools: true}, auditor: {read_audit: true}, admin: {...}}
    approvals: {approvers: [user, tenant_admin, admin], self_approve: true}  # who answers asks
    profiles: {NAME: {roles, allow, deny, approvals, limits, tools: {TOOL: {...}}}}
    tenants: {NAME | "*": {profiles, default_profile, quotas, allow, deny, approvals,
                            limits, egress}}

Semantics live in ``runtime.policy.engine``; cross-references (a tenant naming a profile
that does not exist, an unknown group) are checked in ``runtime.policy.loader``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from runtime.policy.decision import Role
from runtime.policy.limits_spec import LimitsSpec as LimitsSpec  # re-exported: its old home
from runtime.policy.limits_spec import Strict

GROUPS: dict[str, frozenset[str]] = {
    "group:exec": frozenset({"code_exec", "terminal", "process_start", "process_list",
                             "process_output", "process_input", "process_stop",
                             "process_wait", "kernel_exec", "kernel_reset"}),
    "group:fs": frozenset({"filesystem", "edit_file", "read_document", "share_file",
                           "grep", "glob", "tree", "notebook_read", "notebook_edit"}),
    "group:web": frozenset({"http_request", "web_view", "web_search", "browser"}),
    "group:remote": frozenset({"ssh_exec"}),
    "group:memory": frozenset({"memory", "todo", "scratchpad"}),
    "group:cad": frozenset({"model_3d", "scad_lint", "render_3d"}),
    "group:meta": frozenset(
        {"list_tools", "tool_manual", "image_view", "write_tool", "test_tool", "reload_tools",
         "delete_tool", "list_profiles", "switch_profile", "spawn_agent", "mcp_status",
         "content_publish", "reflect", "ask_user", "enter_plan_mode", "exit_plan_mode"}
    ),
}
USER_TOOLS_GROUP = "group:user_tools"
MCP_GROUP = "group:mcp"
"""Tools of the MCP servers a policy declares (`mcp_servers`), named `SERVER__TOOL`."""
MCP_SEPARATOR = "__"
ALL_GROUPS = frozenset(GROUPS) | {USER_TOOLS_GROUP, MCP_GROUP}
BUILTIN_TOOLS: frozenset[str] = frozenset().union(*GROUPS.values())
TOOL_GROUP: dict[str, str] = {tool: group for group, tools in GROUPS.items() for tool in tools}

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}$")
_IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_MCP_SERVER = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
_TENANT = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$")


def _tool_ref(value: str) -> str:
    """A tool name or a known `group:` name."""
    if value.startswith("group:"):
        if value not in ALL_GROUPS:
            known = ", ".join(sorted(ALL_GROUPS))
            raise ValueError(f"unknown group {value!r} (known: {known})")
        return value
    if not TOOL_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a tool name ([a-z][a-z0-9_]*) nor a group:NAME")
    return value


def _host(value: str) -> str:
    if not _HOST.fullmatch(value) or len(value) > 253:
        raise ValueError(f"{value!r} is not a host name (names only: no scheme, port or path)")
    return value


def _image_name(value: str) -> str:
    if not _IMAGE_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not an image name (e.g. python, tools-runner)")
    return value


ToolRef = Annotated[str, AfterValidator(_tool_ref)]
Host = Annotated[str, AfterValidator(_host)]
ImageName = Annotated[str, AfterValidator(_image_name)]
ApprovalWhen = Literal["always", "first_use", "hash_change"]


class QuotasSpec(Strict):
    """Partial per-tenant quotas; unset keys inherit from `defaults.quotas`."""

    max_concurrent: int | None = Field(None, ge=1, le=1024)
    execs_per_minute: int | None = Field(None, ge=1, le=100000)
    session_disk_mb: int | None = Field(None, ge=16, le=1048576)
    upload_mb: int | None = Field(None, ge=1, le=65536)
    tenant_disk_mb: int | None = Field(None, ge=16, le=16777216,
                                       description="all of the tenant's sessions together")
    queue_depth: int | None = Field(None, ge=0, le=1024,
                                    description="calls that may wait past max_concurrent")
    sessions_per_tenant: int | None = Field(None, ge=1, le=100000)
    shares_per_tenant: int | None = Field(None, ge=0, le=100000,
                                          description="live share_file/content_publish links")
    processes_per_tenant: int | None = Field(None, ge=0, le=100000,
                                             description="background processes running")


class Quotas(Strict):
    """Resolved quotas of one tenant."""

    max_concurrent: int = 4
    execs_per_minute: int = 60
    session_disk_mb: int = 1024
    upload_mb: int = 100
    tenant_disk_mb: int = 10240
    sessions_per_tenant: int = 100
    queue_depth: int = 8
    shares_per_tenant: int = 100
    processes_per_tenant: int = 16


class Defaults(Strict):
    limits: LimitsSpec = LimitsSpec()
    quotas: QuotasSpec = QuotasSpec()


_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
_SECRET_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
RESERVED_ENV_NAMES = frozenset({"PATH", "HOME", "LANG", "HTTP_PROXY", "HTTPS_PROXY",
                                "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"})


def _secret_grants(value: dict[str, str]) -> dict[str, str]:
    for env, name in value.items():
        if not _ENV_NAME.fullmatch(env) or env in RESERVED_ENV_NAMES:
            raise ValueError(f"{env!r} is not an environment variable name a secret may use "
                             "(A-Z, 0-9, _; not PATH, HOME, LANG or a proxy variable)")
        if not _SECRET_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a secret name (a-z, 0-9, _)")
    return value


def _sha256(value: str | None) -> str | None:
    if value is not None and not _SHA256.fullmatch(value):
        raise ValueError("tool_hash is a SHA-256 in lower-case hex (64 characters)")
    return value


_KNOWN_HOST = re.compile(r"^(\[[A-Za-z0-9.-]+\]:[0-9]{1,5}|[A-Za-z0-9.-]+) "
                         r"(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|rsa-sha2-(256|512)|ssh-rsa)"
                         r" [A-Za-z0-9+/]+={0,2}$")


def _known_host(value: str) -> str:
    if not _KNOWN_HOST.fullmatch(value):
        raise ValueError("a pinned host key is one known_hosts line: `HOST TYPE BASE64` or "
                         "`[HOST]:PORT TYPE BASE64` (no options, no hashed names)")
    return value


class SshGrant(Strict):
    """`ssh_exec`'s key and pinned host keys (its rule's `ssh`): the key is the tenant's
    secret `key_secret`, handed to the fixed ssh driver on stdin, never to other code."""

    key_secret: str = Field(pattern=r"^[a-z0-9_]{1,64}$", description="the secret's name")
    user: str | None = Field(None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$",
                             description="the remote user when `host` names none")
    known_hosts: list[Annotated[str, AfterValidator(_known_host)]] = Field(
        min_length=1, description="the hosts' keys, known_hosts lines; any other is refused")


class ToolRule(Strict):
    """Per-tool settings inside a profile."""

    limits: LimitsSpec = LimitsSpec()
    image: ImageName | None = None
    languages: list[Literal["python", "bash"]] | None = Field(
        None, description="code_exec only: languages this profile may run"
    )
    network: Literal["none", "egress"] = "none"
    egress: list[Host] = Field(
        default_factory=list, description="hosts (a subset of network.egress_allowlist)"
    )
    secrets: Annotated[dict[str, str], AfterValidator(_secret_grants)] = Field(
        default_factory=dict, description="ENV_VAR: secret_name; the tenant's secret given "
        "to this tool's sandbox as that environment variable")
    tool_hash: Annotated[str | None, AfterValidator(_sha256)] = Field(
        None, description="user tools: required with `secrets`; only the file with this "
        "content hash gets them")
    ssh: SshGrant | None = Field(None, description="ssh_exec only: its key and host keys")


class ApprovalRule(Strict):
    tools: list[ToolRef] = Field(min_length=1)
    when: ApprovalWhen
    approvers: list[Role] | None = Field(None, description="default: policy `approvals`")
    self_approve: bool | None = Field(None, description="default: policy `approvals`")


class Approvers(Strict):
    """Who answers an `ask` (a rule may say otherwise): tokens of these roles in the asking
    tenant; the token that asked only when `self_approve`."""

    approvers: list[Role] = Field(
        default_factory=lambda: list[Role](["user", "tenant_admin", "admin"]), min_length=1)
    self_approve: bool = True


class Profile(Strict):
    description: str = ""
    roles: list[Role] = Field(
        default_factory=lambda: list[Role](["user", "tenant_admin", "admin"]))
    allow: list[ToolRef] = Field(default_factory=list)
    deny: list[ToolRef] = Field(default_factory=list)
    approvals: list[ApprovalRule] = Field(default_factory=list)
    limits: LimitsSpec = LimitsSpec()
    tools: dict[str, ToolRule] = Field(default_factory=dict)
    planning_mandatory: bool = Field(
        False, description="every agent turn starts in plan mode and plans in phases "
        "(analysis, review, structured plan) before a person approves the plan")


class TenantOverlay(Strict):
    """What a tenant entry (or a tenant's own policy) may add: it can only tighten.

    `allow`, when given, is intersected with the profile's allow list; `deny` and
    `approvals` add to the profile's; `limits` and `quotas` can only lower; `egress`,
    when given, is intersected with the tool's egress list.
    """

    allow: list[ToolRef] | None = None
    deny: list[ToolRef] = Field(default_factory=list)
    approvals: list[ApprovalRule] = Field(default_factory=list)
    limits: LimitsSpec = LimitsSpec()
    egress: list[Host] | None = None
    quotas: QuotasSpec = QuotasSpec()


class TenantRule(TenantOverlay):
    """Assignment of a tenant (or `*` = any tenant not named) to profiles, plus its overlay."""

    profiles: list[str] = Field(min_length=1)
    default_profile: str | None = None


class RoleRule(Strict):
    run_tools: bool = False
    read_audit: bool = False
    manage: bool = False


def _default_roles() -> dict[Role, RoleRule]:
    return {
        "user": RoleRule(run_tools=True),
        "auditor": RoleRule(read_audit=True),
        "tenant_admin": RoleRule(run_tools=True, read_audit=True, manage=True),
        "admin": RoleRule(run_tools=True, read_audit=True, manage=True),
    }


def _default_images() -> dict[str, ImageName]:
    return {
        "code_exec": "python",
        "terminal": "python",
        "read_document": "python",
        USER_TOOLS_GROUP: "tools-runner",
        "group:cad": "openscad",
        "group:remote": "ssh",
    }


def _mcp_argument(value: str) -> str:
    if not value or "\x00" in value or len(value) > 4096:
        raise ValueError("a command argument is 1 to 4096 characters, without NUL")
    return value


class McpServer(Strict):
    """A stdio MCP server the policy offers as tools `NAME__TOOL`. It runs like any execution:
    one hardened container per call, in `image`, reaching only the `egress` hosts (a subset of
    network.egress_allowlist) through the egress proxy."""

    command: list[Annotated[str, AfterValidator(_mcp_argument)]] = Field(
        min_length=1, max_length=64, description="argv of the server inside the image")
    image: ImageName
    egress: list[Host] = Field(default_factory=list)


class Network(Strict):
    egress_allowlist: list[Host] = Field(default_factory=list)


class PolicyFile(Strict):
    version: Literal[1]
    description: str = ""
    defaults: Defaults = Defaults()
    images: dict[ToolRef, ImageName] = Field(default_factory=_default_images)
    network: Network = Network()
    roles: dict[Role, RoleRule] = Field(default_factory=_default_roles)
    approvals: Approvers = Approvers()
    profiles: dict[str, Profile] = Field(default_factory=dict)
    tenants: dict[str, TenantRule] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)


NO_SECRETS_TOOLS = frozenset({"code_exec", "terminal"})
"""Built-ins that run whatever code their caller sends: a secret given to them is anyone's."""


def _grant_problems(policy: PolicyFile, tname: str, rule: ToolRule, loc: tuple[str | int, ...]
                    ) -> list[tuple[tuple[str | int, ...], str]]:
    """Secrets follow code, not names: a user tool's grant pins the file (`tool_hash`), an MCP
    server's tool is the code the policy names; no built-in reads a secret, and code_exec or
    terminal would hand one to whoever calls them."""
    where = loc + ("secrets",)
    if tname in NO_SECRETS_TOOLS:
        return [(where, f"a secret cannot be granted to {tname}: it runs whatever code its "
                 "caller sends (grant it to a user tool, with its tool_hash)")]
    if tname in BUILTIN_TOOLS:
        return [(where, f"a secret cannot be granted to the built-in tool {tname} (it reads "
                 "none); grant it to a user tool, with its tool_hash, or an MCP server's tool")]
    server = tname.split(MCP_SEPARATOR, 1)[0]
    if MCP_SEPARATOR in tname and server in policy.mcp_servers:
        return []  # the server's image and command are in this file (a user tool of the
        # same name gets nothing without a matching tool_hash: see the engine)
    if rule.tool_hash is None:
        return [(where, f"a secret granted to the user tool {tname} needs its tool_hash (the "
                 "SHA-256 of the file): without it, any code written under that name gets it")]
    return []


def name_problems(policy: PolicyFile) -> list[tuple[tuple[str | int, ...], str]]:
    """Cross-reference checks pydantic cannot express; each problem with its location."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    allow = set(policy.network.egress_allowlist)
    for pname, profile in policy.profiles.items():
        if not TOOL_NAME.fullmatch(pname):
            problems.append((("profiles", pname), f"{pname!r} is not a profile name"))
        for tname, rule in profile.tools.items():
            loc: tuple[str | int, ...] = ("profiles", pname, "tools", tname)
            if tname.startswith("group:"):  # a group's rule sets limits only
                if not TOOL_NAME.fullmatch(tname.removeprefix("group:")):
                    problems.append((loc, f"{tname!r} is not a group name"))
                if rule.model_fields_set - {"limits"}:
                    problems.append((loc, "a group's rule may set `limits` only"))
            elif not TOOL_NAME.fullmatch(tname):
                problems.append((loc, f"{tname!r} is not a tool name"))
            if rule.languages is not None and tname != "code_exec":
                problems.append((loc + ("languages",), "languages applies to code_exec only"))
            if rule.ssh is not None and tname != "ssh_exec":
                problems.append((loc + ("ssh",), "ssh applies to ssh_exec only"))
            for i, host in enumerate(rule.egress):
                if host not in allow:
                    problems.append(
                        (loc + ("egress", i), f"{host!r} is not in network.egress_allowlist")
                    )
            if rule.network == "egress" and not rule.egress:
                problems.append((loc + ("network",), "network: egress needs an egress list"))
            if rule.secrets:
                problems += _grant_problems(policy, tname, rule, loc)
    for sname, server in policy.mcp_servers.items():
        if not _MCP_SERVER.fullmatch(sname) or len(sname) > 24:
            problems.append((("mcp_servers", sname), f"{sname!r} is not a server name "
                             "(lower-case words joined by single underscores, at most 24)"))
        for i, host in enumerate(server.egress):
            if host not in allow:
                problems.append((("mcp_servers", sname, "egress", i),
                                 f"{host!r} is not in network.egress_allowlist"))
    for tname, tenant in policy.tenants.items():
        if not _TENANT.fullmatch(tname):
            problems.append((("tenants", tname), f"{tname!r} is not a tenant name"))
        for i, pname in enumerate(tenant.profiles):
            if pname not in policy.profiles:
                problems.append((("tenants", tname, "profiles", i), f"no profile {pname!r}"))
        if tenant.default_profile is not None and tenant.default_profile not in tenant.profiles:
            problems.append(
                (("tenants", tname, "default_profile"), "default_profile must be in profiles")
            )
    return problems
