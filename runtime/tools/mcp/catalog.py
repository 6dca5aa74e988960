"""Which tools the policy's MCP servers offer: found by asking each server, in a sandbox.

Listing a server's tools is itself an execution: the Executor decides it, audits it and
runs `navi-mcp-call list` in a fresh container of the server's image. The answer is shared
by every tenant, so the listing runs as the server itself (`server_subject()`: the default
sandbox uid, `defaults.limits`, a quota bucket and cgroup of its own, no secrets), never as
the tenant that happened to ask first; a subject triggers one only where its policy allows
one of the server's tools (tool `NAME__`, group `group:mcp`). It runs on that subject's
node, where the server's calls run (a cluster's control plane need not hold the server's
image for its nodes' sessions). The answer is kept per server *content* (image and command hash): a
changed policy entry is asked again; a failed listing is retried after `RETRY_AFTER_S`; one
the server's quota refuses, or whose node cannot answer now, is not kept. Tools whose
names or schemas Navi cannot take are left out and reported by `mcp_status`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from runtime.errors import NaviError, NodeUnavailable, NotFound, PolicyDenied, QuotaExceeded
from runtime.policy.decision import Action, Subject, server_subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.model import MCP_GROUP, MCP_SEPARATOR, McpServer
from runtime.tools.mcp.protocol import (
    RelayError,
    full_name,
    list_argv,
    listing_tool,
    relay_answer,
    server_hash,
)
from runtime.tools.mcp.tool import McpTool
from runtime.tools.sandboxed import ExecOutcome, Invocation
from runtime.tools.schema_guard import check_schema_cost

log = structlog.get_logger(__name__)

RETRY_AFTER_S = 30.0
MAX_TOOLS_PER_SERVER = 128


class ExecutorLike(Protocol):
    engine: PolicyEngine

    async def execute(self, subject: Subject, action: Action,
                      invocation: Invocation) -> ExecOutcome: ...


@dataclass
class ServerState:
    """What is known of one server: its tools, or why there are none."""

    name: str
    server_hash: str
    tools: dict[str, McpTool] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    checked_at: float = 0.0

    def fresh(self, now: float) -> bool:
        return self.error is None or now - self.checked_at < RETRY_AFTER_S

    def public(self) -> dict[str, Any]:
        state = "ready" if self.error is None else "failed"
        return {"server": self.name, "state": state, "error": self.error,
                "server_sha256": self.server_hash, "tools": sorted(self.tools),
                "skipped": self.skipped}


def parse_listing(name: str, server: McpServer, answer: dict[str, Any]) -> ServerState:
    state = ServerState(name=name, server_hash=server_hash(server), checked_at=time.monotonic())
    listed = answer.get("tools")
    for item in listed if isinstance(listed, list) else []:
        if len(state.tools) >= MAX_TOOLS_PER_SERVER:
            state.skipped["..."] = f"more than {MAX_TOOLS_PER_SERVER} tools"
            break
        remote = item.get("name") if isinstance(item, dict) else None
        if not isinstance(remote, str):
            continue
        tool_name = full_name(name, remote)
        if tool_name is None:
            state.skipped[remote[:80]] = "not a Navi tool name ([a-z][a-z0-9_]*, 64 at most)"
            continue
        schema = item.get("inputSchema")
        try:
            if not isinstance(schema, dict):
                raise ValueError("no inputSchema object")
            check_schema_cost(schema)
        except (NaviError, ValueError) as exc:
            state.skipped[remote] = f"schema refused: {getattr(exc, 'message', exc)}"
            continue
        description = item.get("description")
        state.tools[tool_name] = McpTool(
            tool_name, name, server, remote,
            description if isinstance(description, str) else "", schema)
    return state


class McpCatalog:
    def __init__(self, servers: Callable[[], Mapping[str, McpServer]],
                 executor: ExecutorLike | None = None) -> None:
        self._servers = servers
        self.executor = executor
        self._states: dict[str, ServerState] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def declared(self) -> Mapping[str, McpServer]:
        return self._servers()

    async def tools(self, subject: Subject) -> list[McpTool]:
        found: list[McpTool] = []
        for name, server in self.declared().items():
            state = await self.state(name, server, subject)
            if state is not None:
                found += state.tools.values()
        return found

    async def lookup(self, tool_name: str, subject: Subject) -> McpTool | None:
        """The tool `SERVER__TOOL`, None when `SERVER` is not a declared MCP server."""
        server_name = tool_name.split(MCP_SEPARATOR, 1)[0]
        server = self.declared().get(server_name)
        if MCP_SEPARATOR not in tool_name or server is None:
            return None
        state = await self.state(server_name, server, subject)
        if state is None:
            raise NotFound(f"MCP server {server_name!r} could not be asked for its tools now")
        if state.error is not None:
            raise NotFound(f"MCP server {server_name!r} failed: {state.error}")
        tool = state.tools.get(tool_name)
        if tool is None:
            raise NotFound(f"MCP server {server_name!r} has no tool "
                           f"{tool_name.split(MCP_SEPARATOR, 1)[1]!r}")
        return tool

    async def status(self, subject: Subject) -> list[dict[str, Any]]:
        report = []
        for name, server in self.declared().items():
            state = await self.state(name, server, subject)
            report.append(state.public() if state is not None else
                          {"server": name, "state": "not listed",
                           "error": "your policy allows none of its tools, or the "
                           "server's quota refused listing it now",
                           "server_sha256": server_hash(server), "tools": [], "skipped": {}})
        return report

    async def state(self, name: str, server: McpServer, subject: Subject) -> ServerState | None:
        digest = server_hash(server)
        known = self._states.get(name)
        if known is not None and known.server_hash == digest and known.fresh(time.monotonic()):
            return known
        async with self._locks.setdefault(name, asyncio.Lock()):
            known = self._states.get(name)
            if known is not None and known.server_hash == digest and \
                    known.fresh(time.monotonic()):
                return known
            if not self._may_list(name, server, subject):
                return None
            state = await self._list(name, server, subject.node)
            if state is not None:
                self._states[name] = state
            return state

    def _may_list(self, name: str, server: McpServer, subject: Subject) -> bool:
        """Whether `subject` may have the server listed: its policy allows one of its tools
        (decided, not run; whoever triggers it, the listing runs as the server)."""
        if self.executor is None:
            return False
        action = Action(tool=listing_tool(name), group=MCP_GROUP, tool_hash=server_hash(server))
        return self.executor.engine.decide(subject, action).verdict != "deny"

    async def _list(self, name: str, server: McpServer, node: str) -> ServerState | None:
        """Ask the server for its tools, as the server, on `node` (the asking session's)."""
        if self.executor is None:
            return None
        action = Action(tool=listing_tool(name), group=MCP_GROUP, args={},
                        tool_hash=server_hash(server))
        try:
            outcome = await self.executor.execute(
                server_subject().model_copy(update={"node": node}), action,
                Invocation(argv=list_argv(server)))
        except (PolicyDenied, QuotaExceeded, NodeUnavailable):
            return None
        except NaviError as exc:
            return self._failed(name, server, f"{exc.code}: {exc.message}")
        res = outcome.result
        try:
            if res.timed_out:
                raise RelayError(f"listing timed out after {outcome.timeout_s:g} s")
            state = parse_listing(name, server, relay_answer(res.stdout))
        except RelayError as exc:
            detail = res.stderr.decode("utf-8", errors="replace").strip()[-500:]
            return self._failed(name, server, f"{exc}{': ' + detail if detail else ''}")
        log.info("mcp_server_listed", server=name, tools=len(state.tools),
                 skipped=len(state.skipped))
        return state

    def _failed(self, name: str, server: McpServer, error: str) -> ServerState:
        log.warning("mcp_server_failed", server=name, error=error)
        return ServerState(name=name, server_hash=server_hash(server), error=error,
                           checked_at=time.monotonic())
