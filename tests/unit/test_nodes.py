"""The node seam without a cluster: one lookup per session, calls routed by their node, a
node's errors kept exact across the hop (`runtime.nodes`). Real `Workspaces` on a temp dir
and the `FakeBackend` (the engine's part is tested in tests/docker/test_node_agent.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime.errors import NodeUnavailable, NotFound, PolicyDenied, QuotaExceeded, SandboxError
from runtime.nodes import LocalNode, NodeBackends, Nodes, NodeTable, Placement
from runtime.nodes.failures import Failed, packed, raise_failed
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import ExecRequest
from runtime.store import SessionRecord
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.workspace import Workspaces


class ToN2:
    """A cluster's placement in small: every session goes to, and lives on, node n2."""

    async def place(self) -> str:
        return "n2"

    async def node_of(self, tenant_id: str, session_id: str) -> str:
        return "n2"


def _nodes(tmp_path: Path, placement: Placement | None = None
           ) -> tuple[Nodes, FakeBackend, FakeBackend]:
    here, there = FakeBackend(), FakeBackend()
    table = NodeTable(LocalNode(Workspaces(tmp_path / "a"), here))
    table.add(LocalNode(Workspaces(tmp_path / "b"), there, node_id="n2"))
    return Nodes(table, placement), here, there


def _request(node: str = "local") -> ExecRequest:
    return ExecRequest(argv=["true"], image="x", exec_id="ex_1", node=node)


async def test_a_call_runs_on_its_nodes_backend_and_is_killed_there(tmp_path: Path) -> None:
    nodes, here, there = _nodes(tmp_path)
    backends = NodeBackends(nodes)
    there.push(FakeResponse(delay_s=30))
    call = asyncio.create_task(backends.run(_request("n2")))
    while not there.running:
        await asyncio.sleep(0.01)
    assert backends.running_on("n2") == 1 and backends.running_on("local") == 0
    call.cancel()  # the Executor kills a cancelled call right after
    with pytest.raises(asyncio.CancelledError):
        await call
    await backends.kill("ex_1")
    assert there.killed == ["ex_1"] and here.killed == []
    assert backends.running_on("n2") == 0


async def test_an_unknown_node_is_node_unavailable_naming_it(tmp_path: Path) -> None:
    nodes, _here, _there = _nodes(tmp_path)
    with pytest.raises(NodeUnavailable, match="n9") as caught:
        await NodeBackends(nodes).run(_request("n9"))
    assert caught.value.code == "node_unavailable"
    nodes.discard("n2")
    with pytest.raises(NodeUnavailable):
        nodes.get("n2")
    assert nodes.discard("local") is None and nodes.get("local") is nodes.local


async def test_placement_and_lookup(tmp_path: Path) -> None:
    nodes, _here, _there = _nodes(tmp_path)
    assert await nodes.place() is nodes.local  # no cluster: this machine
    assert await nodes.of_session("t", "s") is nodes.local
    nodes, _here, _there = _nodes(tmp_path, ToN2())  # a cluster's, given at construction
    assert (await nodes.place()).id == "n2"
    assert (await nodes.of_session("t", "s")).id == "n2"


def test_files_go_to_the_sessions_own_node(tmp_path: Path) -> None:
    nodes, _here, _there = _nodes(tmp_path)
    tenant, session = new_tenant_id(), new_session_id()
    nodes.get("n2").create(tenant, session)
    with nodes.get("n2").open(tenant, session) as files:
        files.write_bytes("a.txt", b"on n2")
    with nodes.get("n2").open(tenant, session) as files:
        assert files.read_bytes("a.txt") == b"on n2"
    with pytest.raises(NotFound):
        nodes.local.open(tenant, session)


async def test_a_sessions_state_is_its_nodes(tmp_path: Path) -> None:
    """`GET /v1/sessions/{id}` says `state` as the session's node sees it: made on n2 (its
    disk in use there) it is `active`, though this machine holds nothing of it; an
    unavailable node says `idle`. Red with the control plane's own `Workspaces.state`."""
    nodes, _here, _there = _nodes(tmp_path)
    tenant, session = new_tenant_id(), new_session_id()
    nodes.get("n2").create(tenant, session)
    record = SessionRecord(id=session, tenant_id=tenant, profile="developer", created_at=0.0,
                           node="n2")
    assert await nodes.state_of(record) == "active"
    assert nodes.local.state(tenant, session) == "idle"
    nodes.discard("n2")
    assert await nodes.state_of(record) == "idle"


@pytest.mark.parametrize("exc", [
    NotFound("no such file: a.txt"),
    PolicyDenied("denied", rule="tools.x"),
    QuotaExceeded("too many", retry_after=7, quota="execs_per_minute"),
    NodeUnavailable("n3"),
])
def test_a_nodes_error_arrives_as_itself(exc: Exception) -> None:
    with pytest.raises(type(exc)) as caught:
        raise_failed(packed(exc))
    assert type(caught.value) is type(exc)
    assert caught.value.message == exc.message  # type: ignore[attr-defined]
    assert caught.value.details == exc.details  # type: ignore[attr-defined]
    for name in ("rule", "retry_after", "node"):
        assert getattr(caught.value, name, None) == getattr(exc, name, None)


def test_anything_else_is_a_sandbox_error_without_its_text() -> None:
    failed = packed(OSError("/srv/node/secret/path: no space"))
    assert failed == Failed("SandboxError", "the node agent failed: OSError")
    with pytest.raises(SandboxError):
        raise_failed(Failed("NotAnError", "x"))
