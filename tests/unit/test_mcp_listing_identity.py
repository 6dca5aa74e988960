"""An MCP server's tool listing is shared by every tenant, so it runs as the server itself
(`_server`: the default sandbox uid, `defaults.limits`, a quota bucket of its own, no
secrets), never under the limits, uid, quota or secrets of the tenant that asked first.
A real Executor and audit log over the FakeBackend, which records what it was asked to run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.audit import AuditLog
from runtime.errors import QuotaExceeded
from runtime.executor import Executor
from runtime.policy import (
    SERVER_TENANT,
    Action,
    PolicyEngine,
    Subject,
    parse_policy,
    server_subject,
)
from runtime.policy.model import MCP_GROUP
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.store import Store
from runtime.store.secrets import SecretBox, SecretStore
from runtime.tools import ToolContext, ToolServices, build_tools
from tests.fakes.calls import call

POLICY = """
version: 1
defaults: {limits: {timeout_s: 40, memory_mb: 512}}
mcp_servers:
  demo: {command: [python3, /opt/demo.py], image: python}
profiles:
  all:
    roles: [user]
    allow: [group:mcp]
    limits: {memory_mb: 128}
    tools:
      "group:mcp": {limits: {timeout_s: 3}}
      demo__: {secrets: {DEMO_KEY: demo_key}}
  nothing: {roles: [user], allow: [group:meta]}
tenants:
  small:
    profiles: [all, nothing]
    limits: {memory_mb: 64, timeout_s: 2}
    quotas: {execs_per_minute: 1}
  "*": {profiles: [all, nothing]}
"""
LISTING = json.dumps({"ok": True, "tools": [
    {"name": "add", "description": "Add.", "inputSchema": {"type": "object"}}]}).encode()
ADDED = json.dumps({"ok": True, "result": {"content": [{"type": "text", "text": "5"}]}})


@dataclass
class Rig:
    tools: ToolServices
    backend: FakeBackend
    audit: AuditLog
    executor: Executor
    workspace: Path
    small: Subject
    big: Subject

    async def call(self, subject: Subject, tool: str, args: dict[str, Any]) -> Any:
        ctx = ToolContext(subject=subject, executor=self.executor,
                          workspace_path=self.workspace)
        return await call(self.tools.registry, tool, args, ctx)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = await Store.open(tmp_path / "navi.sqlite3")
    small, big = await store.create_tenant("small"), await store.create_tenant("big")
    secrets = SecretStore(store, SecretBox.in_data_dir(tmp_path))
    await secrets.set(small.id, "demo_key", "k-small-tenant-only")
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    engine = PolicyEngine(parse_policy(POLICY))
    backend = FakeBackend()
    executor = Executor(engine=engine, backend=backend, audit=audit, secrets=secrets,
                        resolve_image=lambda name: f"navi/{name}:latest")
    tools = build_tools(tmp_path / "data", policy=engine, executor=executor)
    await tools.open()
    ws = tmp_path / "ws"
    ws.mkdir()
    try:
        yield Rig(tools, backend, audit, executor, ws,
                  Subject(tenant=small.id, tenant_name="small", profile="all", session="s1",
                          sandbox_uid=70001),
                  Subject(tenant=big.id, tenant_name="big", profile="all", session="s2",
                          sandbox_uid=70002))
    finally:
        await tools.close()
        await audit.close()
        await store.close()


async def test_the_listing_runs_as_the_server_not_as_the_first_caller(rig: Rig) -> None:
    rig.backend.push(FakeResponse(stdout=LISTING), FakeResponse(stdout=ADDED.encode()))
    added = await rig.call(rig.small, "demo__add", {"a": 2, "b": 3})
    # the small tenant's one exec a minute is its own call's, not the shared listing's
    assert added.success and added.output == "5", added
    listing, call = rig.backend.requests
    assert listing.argv[-4:] == ["list", "--", "python3", "/opt/demo.py"]
    assert (listing.tenant, listing.uid, listing.session) == (SERVER_TENANT, None, "none")
    assert (listing.limits.memory_mb, listing.limits.timeout_s) == (512, 40)  # the defaults
    assert "DEMO_KEY" not in listing.env  # no tenant's secret
    assert (call.tenant, call.uid, call.limits.memory_mb, call.limits.timeout_s) == (
        rig.small.tenant, 70001, 64, 2)
    first, second = await rig.audit.records(kind="intent")
    assert (first.tenant, first.user, first.tool, first.rule) == (
        SERVER_TENANT, "navi", "demo__", "mcp_servers.demo")
    assert first.secrets is None and second.tenant == rig.small.tenant

    rig.backend.push(FakeResponse(stdout=ADDED.encode()))
    assert (await rig.call(rig.big, "demo__add", {})).success  # the kept listing: no new run
    assert [r.tenant for r in rig.backend.requests] == [
        SERVER_TENANT, rig.small.tenant, rig.big.tenant]
    with pytest.raises(QuotaExceeded):  # the small tenant's quota is still its own
        await rig.call(rig.small, "demo__add", {})


async def test_a_subject_its_policy_denies_every_tool_starts_no_listing(rig: Rig) -> None:
    denied = rig.small.model_copy(update={"profile": "nothing"})
    listed = await rig.call(denied, "list_tools", {})
    assert listed.success and not any(t["name"].startswith("demo__")
                                      for t in listed.metadata["tools"])
    assert rig.backend.requests == []
    [status] = (await rig.call(denied, "mcp_status", {})).metadata["servers"]
    assert status["state"] == "not listed" and "allows none of its tools" in status["error"]


def test_the_server_subject_may_list_declared_servers_and_nothing_else() -> None:
    engine = PolicyEngine(parse_policy(POLICY))
    server = server_subject()
    listing = engine.decide(server, Action(tool="demo__", group=MCP_GROUP))
    assert listing.allowed and listing.rule == "mcp_servers.demo" and listing.secrets == {}
    assert listing.image == "python" and listing.limits.memory_mb == 512
    for action in (Action(tool="demo__add", group=MCP_GROUP),
                   Action(tool="ghost__", group=MCP_GROUP),
                   Action(tool="code_exec", args={"language": "python"}),
                   Action(tool="demo__", group="group:user_tools")):
        assert engine.decide(server, action).verdict == "deny", action
    assert engine.quotas(SERVER_TENANT).execs_per_minute == 60  # not `*`'s or any tenant's
