"""Calls on a node go over its agent's exec channel (`runtime.cluster.agent.channel`), not a
Ray task each, on a real local cluster: this process is the control plane
(`tests.docker.node_plane.joined`), the agent counts the calls its channel took. A dropped
connection costs at most the call in flight (`NodeUnavailable`, the node kept); the next
call connects again; a call ended early is killed on the node."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from runtime.errors import NodeUnavailable, NotFound
from runtime.sandbox.models import ExecRequest, Limits
from runtime.store.ids import new_session_id, new_tenant_id
from tests.docker.cluster_rig import IMAGE, Cluster, module_cluster
from tests.docker.node_plane import joined

if TYPE_CHECKING:
    from runtime.cluster.control.remote import RemoteNode

pytestmark = pytest.mark.docker
cluster = module_cluster()
MiB = 1024 * 1024
WAIT_UP = "import time; print('up', flush=True); time.sleep({}); open('/workspace/late.txt', 'w')"


@pytest.fixture(scope="module")
def plane(cluster: Cluster) -> Iterator[tuple[dict[str, RemoteNode], list[str]]]:
    lost: list[str] = []
    with joined(cluster, on_lost=lost.append) as nodes:
        yield nodes, lost


@pytest.fixture
def session(plane: tuple[dict[str, RemoteNode], list[str]]) -> tuple[RemoteNode, str, str]:
    node = plane[0]["n1"]
    tenant, sid = new_tenant_id(), new_session_id()
    node.create(tenant, sid, uid=65534, disk_bytes=64 * MiB, tenant_disk_bytes=256 * MiB)
    return node, tenant, sid


def request(node: RemoteNode, tenant: str, sid: str, argv: list[str]) -> ExecRequest:
    return ExecRequest(argv=argv, image=IMAGE, exec_id=f"ex_{uuid.uuid4().hex[:24]}",
                       tenant=tenant, session=sid, node=node.id, uid=65534,
                       workspace=node.verify(tenant, sid), tmp=node.tmp_path(tenant, sid),
                       limits=Limits(timeout_s=30))


def channel_calls(node: RemoteNode, drop: bool = False) -> int:
    hop: Any = node._hop
    return int(hop.get(hop.actor.channel_calls.remote(drop)))


async def durable() -> None:  # the audit intent, written
    await asyncio.sleep(0.01)


async def test_calls_go_over_the_channel_and_a_dropped_connection_is_opened_again(
        session: tuple[RemoteNode, str, str],
        plane: tuple[dict[str, RemoteNode], list[str]]) -> None:
    """Red if calls go by Ray (the agent's channel count stays), or if a dropped
    connection is not opened again (the call after it goes by Ray or fails)."""
    node, tenant, sid = session
    before = channel_calls(node)
    assert before >= 0, "the agent has no channel"
    for n in range(3):
        result = await node.backend.run(request(node, tenant, sid,
                                                ["python3", "-c", f"print({n})"]),
                                        before_start=durable())
        assert result.exit_code == 0 and result.stdout == f"{n}\n".encode(), result
    assert channel_calls(node) == before + 3
    assert channel_calls(node, drop=True) == before + 3  # the connection is closed
    await asyncio.sleep(0.2)
    after = await node.backend.run(request(node, tenant, sid, ["python3", "-c", "print(7)"]),
                                   before_start=durable())
    assert after.stdout == b"7\n"
    assert channel_calls(node) == before + 4  # over a new connection, not by Ray
    assert plane[1] == []  # no node was marked lost


async def test_a_call_in_flight_when_the_connection_drops_fails_and_the_node_stays(
        session: tuple[RemoteNode, str, str],
        plane: tuple[dict[str, RemoteNode], list[str]]) -> None:
    node, tenant, sid = session
    up = asyncio.Event()

    async def on_output(_: object) -> None:
        up.set()

    running = asyncio.create_task(node.backend.run(
        request(node, tenant, sid, ["python3", "-c", WAIT_UP.format(3)]), on_output,
        before_start=durable()))
    await asyncio.wait_for(up.wait(), 30)
    channel_calls(node, drop=True)
    with pytest.raises(NodeUnavailable):
        await asyncio.wait_for(running, 20)
    assert plane[1] == []  # the agent answered Ray: the node is not lost
    await asyncio.sleep(4)  # had the call gone on, it would have written its file
    with pytest.raises(NotFound):
        node.open(tenant, sid).stat("late.txt")
    again = await node.backend.run(request(node, tenant, sid, ["python3", "-c", "print(8)"]))
    assert again.stdout == b"8\n"


async def test_a_call_ended_early_is_killed_on_its_node(
        session: tuple[RemoteNode, str, str]) -> None:
    """Red if the channel's cancel does not reach the node (the call writes its file)."""
    node, tenant, sid = session
    before = channel_calls(node)
    up = asyncio.Event()

    async def on_output(_: object) -> None:
        up.set()

    running = asyncio.create_task(node.backend.run(
        request(node, tenant, sid, ["python3", "-c", WAIT_UP.format(3)]), on_output,
        before_start=durable()))
    await asyncio.wait_for(up.wait(), 30)
    t0 = time.monotonic()
    running.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await running
    assert time.monotonic() - t0 < 2
    await asyncio.sleep(4)
    with pytest.raises(NotFound):
        node.open(tenant, sid).stat("late.txt")
    assert channel_calls(node) == before + 1
