"""The node agent over a real local cluster: `RemoteNode` <-> `NodeAgent` on a Ray node.

One 2-node cluster for the module (`cluster_rig`). This process joins it as the control
plane does (the cluster's token, namespace "navi") and gets each node's agent with
`agent_for`; everything a session needs then crosses the hop for real: its disk, its files
(in chunks), hardened calls on the node's own engine with their output streamed, kill, the
node's warm pool. The last test kills n2's agent: n2 is then `NodeUnavailable`, n1 is not.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from runtime.errors import InvalidInput, InvalidPath, NodeUnavailable, NotFound, PayloadTooLarge
from runtime.nodes.wire import ObjectMount, RunOnNode
from runtime.sandbox.models import ExecRequest, ExecResult, Limits, Mount, OutputChunk
from runtime.store.ids import new_session_id, new_tenant_id
from tests.docker.cluster_rig import IMAGE, Cluster, module_cluster
from tests.docker.node_plane import joined

if TYPE_CHECKING:
    from runtime.cluster.control.remote import RemoteNode

pytestmark = pytest.mark.docker
cluster = module_cluster()
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def plane(cluster: Cluster) -> Iterator[dict[str, RemoteNode]]:
    """This process as a control plane; `lost` on each node: what on_lost was told."""
    lost: list[str] = []
    with joined(cluster, on_lost=lost.append) as nodes:
        for node in nodes.values():
            node.lost = lost  # type: ignore[attr-defined]
        yield nodes


@pytest.fixture
def session(plane: dict[str, RemoteNode]) -> tuple[RemoteNode, str, str]:
    node = plane["n1"]
    tenant, sid = new_tenant_id(), new_session_id()
    node.create(tenant, sid, uid=65534, disk_bytes=64 * MiB, tenant_disk_bytes=256 * MiB)
    return node, tenant, sid


def request(node: RemoteNode, tenant: str, sid: str, argv: list[str], **extra: Any
            ) -> ExecRequest:
    return ExecRequest(argv=argv, image=IMAGE, exec_id=f"ex_{uuid.uuid4().hex[:24]}",
                       tenant=tenant, session=sid, node=node.id, uid=65534,
                       workspace=node.verify(tenant, sid), tmp=node.tmp_path(tenant, sid),
                       limits=Limits(timeout_s=30), **extra)


def node_engine(cluster: Cluster, node_id: str, *args: str) -> str:
    sock = next(n["socket"] for n in cluster.state["nodes"] if n["id"] == node_id)
    return subprocess.run(["docker", "-H", f"unix://{sock}", *args], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def node_data(cluster: Cluster, node_id: str) -> Path:
    """The node's data dir as this test (root, on the host) reaches it."""
    return Path(cluster.dir) / "nodes" / node_id / "navi"


def test_a_nodes_data_dir_is_not_the_control_planes(
        session: tuple[RemoteNode, str, str], cluster: Cluster) -> None:
    """The node keeps its files under `NODE_DATA` in its own mount namespace: there the
    session's directory is, here (the control plane's namespace) that path is not; so a
    node path that leaked here, or a path of ours sent there, fails as across machines."""
    from runtime.cluster.local.engines import NODE_DATA

    node, tenant, _sid = session
    engine = int((Path(next(n["run_dir"] for n in cluster.state["nodes"]
                            if n["id"] == node.id)) / "docker.pid").read_text())
    there = subprocess.run(["nsenter", f"--mount=/proc/{engine}/ns/mnt", "ls",
                            str(NODE_DATA / "workspaces" / tenant)],
                           capture_output=True, text=True, timeout=30)
    assert there.returncode == 0 and there.stdout.strip(), there.stderr
    assert not (NODE_DATA / "workspaces" / tenant).exists()  # not in this namespace


def test_files_cross_the_hop_in_chunks(session: tuple[RemoteNode, str, str]) -> None:
    node, tenant, sid = session
    files = node.open(tenant, sid)
    data = os.urandom(3 * MiB + 123)  # four chunks each way
    with files.writer("dir/big.bin", expected_size=len(data)) as w:
        for i in range(0, len(data), 64 * 1024):
            w.write(data[i:i + 64 * 1024])
    assert files.stat("dir/big.bin").size == len(data)
    with files.open_read("dir/big.bin") as reader:
        assert reader.size == len(data)
        assert b"".join(reader) == data
    files.write_bytes("a.txt", b"hello")
    files.mkdir("sub")
    moved = files.move("a.txt", "sub/b.txt")
    assert moved.path == "sub/b.txt"
    assert sorted(e.path for e in files.list()) == ["dir/big.bin", "sub/b.txt"]
    assert files.read_bytes("sub/b.txt") == b"hello"
    assert files.usage_bytes() >= len(data)
    with pytest.raises(PayloadTooLarge):  # past max_bytes: refused, nothing left behind
        with files.writer("too/big.bin", max_bytes=100 * 1024) as w:
            for _ in range(4):
                w.write(b"x" * 64 * 1024)
    assert "too/big.bin" not in [e.path for e in files.list()]
    files.delete("dir")
    assert [e.path for e in files.list()] == ["sub/b.txt"]
    with pytest.raises(NotFound):  # the node's errors arrive as themselves
        files.read_bytes("dir/big.bin")
    with pytest.raises(InvalidPath):
        files.stat("../etc/passwd")
    files.close()


PROBE = ("import json, os; s = dict(l.split(':', 1) for l in open('/proc/self/status'));"
         "open('/workspace/out.txt', 'w').write('from the node');"
         "print(1); print(json.dumps({'nnp': s['NoNewPrivs'].strip(), 'cap': s['CapEff']"
         ".strip(), 'uid': os.getuid(), 'nets': sorted(os.listdir('/sys/class/net')),"
         "'mounts': [l.split()[3] for l in open('/proc/self/mounts') if ' /workspace ' in l]}))")


def test_searches_run_on_the_node(session: tuple[RemoteNode, str, str]) -> None:
    """grep, glob and tree cross the hop as one call each: the node walks its own disk."""
    node, tenant, sid = session
    files = node.open(tenant, sid)
    files.write_bytes("src/app.py", b"import os\nTODO = 1\n")
    files.write_bytes("notes.md", b"todo: call\n")
    found = files.grep("(?i)todo", glob="*.py")
    assert [(m.path, m.line, m.text) for m in found.matches] == [("src/app.py", 2, "TODO = 1")]
    assert files.glob("*.md").paths == ["notes.md"]
    assert [e.path for e in files.tree(depth=1).entries] == ["notes.md", "src"]
    with pytest.raises(InvalidInput):
        files.grep(r"(a)\1")
    files.close()
    tmp = node.open(tenant, sid, root="tmp")
    tmp.write_bytes("log.txt", b"TODO in tmp\n")
    assert [m.path for m in tmp.grep("TODO").matches] == ["log.txt"]
    tmp.close()


async def test_a_hardened_call_runs_on_the_node_after_its_intent(
        session: tuple[RemoteNode, str, str], cluster: Cluster) -> None:
    node, tenant, sid = session
    opened: list[float] = []

    async def intent() -> None:  # the write-ahead intent, durable only after 0.5 s
        await asyncio.sleep(0.5)
        opened.append(time.time())

    call = request(node, tenant, sid, ["python3", "-c", "import time; print(time.time());"
                                       + PROBE])
    result = await node.backend.run(call, before_start=intent())
    assert result.exit_code == 0, result.stderr
    started, one, probe = result.stdout.decode().splitlines()
    assert opened and float(started) >= opened[0] - 0.05  # nothing ran before the intent
    evidence = json.loads(probe)
    assert one == "1"
    assert evidence["nnp"] == "1" and int(evidence["cap"], 16) == 0
    assert evidence["uid"] == 65534 and evidence["nets"] == ["lo"]  # --network none
    assert evidence["mounts"] and "nosuid" in evidence["mounts"][0].split(",")
    # the file the call wrote is on the node's disk, where the files API reads it
    assert node.open(tenant, sid).read_bytes("out.txt") == b"from the node"
    assert sid not in subprocess.run(["docker", "ps", "-a", "--format", "{{.Labels}}"],
                                     capture_output=True, text=True).stdout  # not here


async def test_a_call_whose_intent_fails_runs_nothing(session: tuple[RemoteNode, str, str]
                                                      ) -> None:
    node, tenant, sid = session

    async def intent() -> None:  # the audit log refuses the intent, after a while
        await asyncio.sleep(0.5)
        raise OSError("the audit intent could not be written")

    call = request(node, tenant, sid, ["sh", "-c", "echo ran > /workspace/gate.txt"])
    with pytest.raises(OSError):
        await node.backend.run(call, before_start=intent())
    await asyncio.sleep(1.0)  # had the node run it anyway, the file would be there by now
    with pytest.raises(NotFound):
        node.open(tenant, sid).stat("gate.txt")


async def test_output_streams_while_the_call_runs(session: tuple[RemoteNode, str, str]
                                                  ) -> None:
    node, tenant, sid = session
    seen: list[tuple[float, OutputChunk]] = []

    async def on_output(chunk: OutputChunk) -> None:
        seen.append((time.monotonic(), chunk))

    call = request(node, tenant, sid, ["python3", "-u", "-c",
                                       "import time; print('a'); time.sleep(1.5); print('b')"])
    result = await node.backend.run(call, on_output)
    ended = time.monotonic()
    assert result.stdout == b"a\nb\n"
    first = next(t for t, c in seen if b"a" in c.data)
    assert ended - first >= 1.0, "the first line arrived only with the result"


async def test_a_running_call_is_killed_on_its_node(session: tuple[RemoteNode, str, str]
                                                   ) -> None:
    node, tenant, sid = session
    started = asyncio.Event()

    async def on_output(chunk: OutputChunk) -> None:
        started.set()

    call = request(node, tenant, sid, ["python3", "-u", "-c",
                                       "import time; print('up'); time.sleep(60)"])
    running = asyncio.create_task(node.backend.run(call, on_output))
    await asyncio.wait_for(started.wait(), 30)
    t0 = time.monotonic()
    await node.backend.kill(call.exec_id)
    result: ExecResult = await asyncio.wait_for(running, 20)
    assert result.exit_code != 0 and time.monotonic() - t0 < 10


async def test_the_nodes_warm_pool_serves_the_session(
        session: tuple[RemoteNode, str, str], cluster: Cluster) -> None:
    """After a call the node's pool has a ready container for the tenant (the tenant pool:
    the session is bound when a call takes it), the next call takes it (single use), and
    releasing the session leaves nothing of it on the node."""
    node, tenant, sid = session
    first = await node.backend.run(request(node, tenant, sid, ["python3", "-c", "print(1)"]))
    assert first.exit_code == 0

    def warm(label: str = f"navi.tenant={tenant}") -> list[str]:
        return node_engine(cluster, node.id, "ps", "-q", "--filter", f"label={label}").split()

    deadline = time.monotonic() + 20
    while not warm() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    ready = warm()
    assert ready, "no warm container on the node after a call"
    second = await node.backend.run(request(node, tenant, sid, ["python3", "-c", "print(2)"]))
    assert second.stdout == b"2\n"
    deadline = time.monotonic() + 20  # the used one is removed after the call
    while ready[0] in warm() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert ready[0] not in warm()  # the ready one served it (single use)
    await node.backend.release_session(sid)
    deadline = time.monotonic() + 20
    while warm(f"navi.session={sid}") and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert warm(f"navi.session={sid}") == []


def _raw_run(node: RemoteNode, payload: object) -> list[Any]:
    """A request straight to the agent's `run`, as anyone holding the cluster token could
    send it (not through `RemoteBackend`): what comes back, a `Failed` raised."""
    stream: Any = node._hop.actor.run.options(num_returns="streaming").remote(payload)
    return [item for ref in stream for item in node._hop.get(ref)]


def _forged(call: ExecRequest, **request: Any) -> bytes:
    """`RunOnNode` JSON with the request's fields replaced past its validation."""
    body = json.loads(RunOnNode.of(call, [], False).model_dump_json())
    body["request"].update(request)
    return json.dumps(body).encode()


async def test_a_forged_request_naming_a_path_is_refused(
        session: tuple[RemoteNode, str, str]) -> None:
    """The agent validates every request (JSON, pydantic) and mounts only from its own
    directories: a path outside them, another session's, or a pickled object is refused
    before anything runs."""
    node, tenant, sid = session
    other_tenant, other = new_tenant_id(), new_session_id()
    node.create(other_tenant, other)
    node.open(other_tenant, other).write_bytes("secret.txt", b"not yours")
    call = request(node, tenant, sid, ["sh", "-c", "cat /opt/x/passwd /workspace/secret.txt;"
                                       " echo ran > /workspace/forged.txt"])
    forged = [
        _forged(call, mounts=[{"source": "/etc", "target": "/opt/x", "read_only": True}]),
        _forged(call, workspace="/etc"),
        _forged(call, tmp="/etc"),
        _forged(call, workspace=f"/{other_tenant}/{other}/workspace"),
        _forged(call, session=other, tenant=other_tenant, workspace="/etc"),
    ]
    for payload in forged:
        with pytest.raises(InvalidInput, match="refused node request"):
            _raw_run(node, payload)
    with pytest.raises(InvalidInput, match="JSON"):  # the old trusted pickle
        _raw_run(node, call.model_copy(update={"mounts": [Mount(source=Path("/etc/passwd"),
                                                                 target="/opt/x/passwd")]}))
    with pytest.raises(NotFound, match="tool object"):  # a hash the node never got
        _raw_run(node, RunOnNode.of(call, [ObjectMount(sha256="0" * 64, target="/opt/x")],
                                    False).model_dump_json().encode())
    with pytest.raises(InvalidInput, match="hash"):  # bytes that are not what they claim
        _raw_run(node, RunOnNode.of(call, [ObjectMount(sha256="0" * 64, target="/opt/x",
                                                       data=b"x")], False)
                 .model_dump_json().encode())
    with pytest.raises(NotFound):
        node.open(tenant, sid).stat("forged.txt")  # nothing ran


async def test_results_name_session_paths_only(session: tuple[RemoteNode, str, str]) -> None:
    """A truncated call's full output is kept on the node; the result names it relative to
    the session, never by the node's host path."""
    node, tenant, sid = session
    call = request(node, tenant, sid, ["python3", "-c", "print('x' * 5000)"])
    call = call.model_copy(update={"limits": Limits(timeout_s=30, output_bytes=1024)})
    result = await node.backend.run(call)
    assert result.truncated and result.artifacts, result
    assert all(not a.startswith("/") and ".." not in a for a in result.artifacts), result
    assert result.artifacts[0] == f"artifacts/{call.exec_id}.stdout"


async def test_a_mounted_file_travels_by_its_hash(
        session: tuple[RemoteNode, str, str], tmp_path: Path, cluster: Cluster) -> None:
    """A user tool's copy on the control plane reaches the node by content hash: the first
    call carries its bytes, the node keeps them in its own tool-object directory, and the
    next call names the hash only."""
    node, tenant, sid = session
    code = b"print('tool code ' + str(6 * 7))\n# " + os.urandom(8).hex().encode() + b"\n"
    copy = tmp_path / "copy.py"  # a path only this side has
    copy.write_bytes(code)
    sha = hashlib.sha256(code).hexdigest()
    mounts = [Mount(source=copy, target="/opt/navi/tool.py")]
    first = await node.backend.run(request(node, tenant, sid, ["cat", "/opt/navi/tool.py"],
                                           mounts=mounts))
    assert first.exit_code == 0 and first.stdout == code, first.stderr
    kept = node_data(cluster, node.id) / "tool-objects" / sha
    assert kept.read_bytes() == code
    assert sha in node.backend._held  # the next call names the hash only
    second = await node.backend.run(request(node, tenant, sid,
                                            ["python3", "/opt/navi/tool.py"], mounts=mounts))
    assert second.exit_code == 0 and second.stdout == b"tool code 42\n", second.stderr


def test_a_session_removed_on_its_node_is_gone(session: tuple[RemoteNode, str, str]) -> None:
    node, tenant, sid = session
    node.open(tenant, sid).write_bytes("x", b"1")
    assert node.remove(tenant, sid)
    with pytest.raises(NotFound):
        node.open(tenant, sid).list()


async def test_a_dead_agent_is_node_unavailable_and_only_its_node(
        plane: dict[str, RemoteNode], cluster: Cluster) -> None:
    n1, n2 = plane["n1"], plane["n2"]
    tenant, sid = new_tenant_id(), new_session_id()
    n2.create(tenant, sid, disk_bytes=64 * MiB, tenant_disk_bytes=64 * MiB)
    LIMITED.append(tenant)
    pid = n2._hop.get(n2._hop.actor.pid.remote())
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(NodeUnavailable) as caught:
        n2.open(tenant, sid).list()
    assert caught.value.code == "node_unavailable" and "n2" in caught.value.message
    with pytest.raises(NodeUnavailable):
        await n2.backend.run(request(n2, tenant, sid, ["true"]))
    assert "n2" in n2.lost  # type: ignore[attr-defined]
    other_tenant, other = new_tenant_id(), new_session_id()
    n1.create(other_tenant, other)
    assert n1.open(other_tenant, other).list() == []  # n1 goes on


LIMITED: list[str] = []  # the tenant the dead agent was told a 64 MiB disk limit for


def test_a_restarted_agent_keeps_its_tenants_disk_limits(
        plane: dict[str, RemoteNode], cluster: Cluster) -> None:
    """n2's agent comes back (made again, as the control plane does when a node returns):
    a disk made there for the tenant is admitted against the limit the dead agent was told,
    not unlimited until the control plane says it again."""
    from runtime.cluster import link
    from runtime.cluster.control.remote import agent_for
    from runtime.errors import DiskQuotaExceeded

    [tenant] = LIMITED
    ray_id = next(n.ray_id for n in link.nodes() if n.id == "n2")
    n2 = agent_for("n2", ray_id)  # this process is still joined (the module's plane)
    assert n2.state(tenant, new_session_id()) == "idle"
    if not list((node_data(cluster, "n2") / "workspaces" / tenant).glob("*.img")):
        pytest.skip("the node has no session disks (no loop devices): no disk quota")
    with pytest.raises(DiskQuotaExceeded):
        n2.create(tenant, new_session_id(), disk_bytes=64 * MiB)
