"""User tools' content-addressed copies: made only for admitted calls, counted in the tenant's
disk quota, removed when nothing refers to them (real files, real audit log, real session
disks where the machine has loop devices; the sandbox is the FakeBackend)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.config import PROJECT_ROOT
from runtime.errors import DiskQuotaBusy, QuotaExceeded
from runtime.policy import PolicyEngine
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.tools.user.descriptor import content_hash
from runtime.tools.user.objects import ToolObjects, objects_root, tenant_copy_bytes
from runtime.workspace import Workspaces
from runtime.workspace.disk import SessionDisks, loop_mounts_available
from tests.fakes.calls import call
from tests.fakes.tool_rigs import FakeRig, open_fake_rig

MiB = 1024 * 1024
TENANT = "t_" + "a" * 16
OK = FakeResponse(stdout=b'{"ok": true, "result": "fine"}\n')


def tool_source(name: str, version: int = 1) -> str:
    return (f'name = "{name}"\ndescription = "Version {version}."\n'
            'parameters = {"type": "object", "properties": {}}\n'
            f"async def execute(params):\n    return 'v{version}'\n")


@dataclass
class Rig(FakeRig):
    workspaces: Workspaces = field(kw_only=True)

    @property
    def copies(self) -> Path:
        return self.services.user_tools.store.root / ".objects" / TENANT

    def listed(self) -> list[str]:
        return sorted(p.name for p in self.copies.iterdir()) if self.copies.exists() else []

    async def invoke(self, tool: str, args: dict[str, Any]) -> Any:
        return await call(self.services.registry, tool, args, self.ctx())


def policy_file(tmp_path: Path, **quotas: int) -> Path:
    data = yaml.safe_load((PROJECT_ROOT / "policies" / "default.yaml").read_text())
    data["defaults"]["quotas"].update(quotas)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def make_rig(tmp_path: Path, *, disks: bool = False, **quotas: int) -> Rig:
    copies = objects_root(tmp_path / "data")  # open_fake_rig's tool store: counted, as serve
    workspaces = Workspaces(tmp_path / "workspaces",
                            disks=SessionDisks(tmp_path / "workspaces", enabled=disks,
                                               reserve_bytes=0),
                            count_also=lambda tenant_id: tenant_copy_bytes(copies, tenant_id))
    rig = await open_fake_rig(tmp_path, PolicyEngine.from_file(policy_file(tmp_path, **quotas)),
                              backend=FakeBackend(default=OK), tenant=TENANT, shipped_dir=None,
                              tenant_disk=workspaces)
    return Rig(**vars(rig), workspaces=workspaces)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    r = await make_rig(tmp_path, execs_per_minute=1)
    yield r
    await r.close()


async def test_refused_calls_write_no_copy(rig: Rig) -> None:
    """Copies are made after admission. 20 versions tested under a quota of 1 call
    a minute: 19 are refused, and only the one that ran has a copy."""
    outcomes = []
    for i in range(20):
        await rig.invoke("write_tool", {"name": f"tool{i}", "code": tool_source(f"tool{i}")})
        try:
            outcomes.append((await rig.invoke("test_tool", {"name": f"tool{i}"})).success)
        except QuotaExceeded:
            outcomes.append(False)
    assert outcomes.count(True) == 1
    assert len(rig.listed()) == 1, rig.listed()
    assert len(await rig.audit.records(kind="denied")) == 19


async def test_replaced_and_deleted_versions_are_removed_in_use_ones_stay(
        tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout", 1)})
        assert (await rig.invoke("test_tool", {"name": "shout"})).success
        [v1] = rig.listed()
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout", 2)})
        assert rig.listed() == []  # v1 is no longer current and nothing runs it
        assert (await rig.invoke("test_tool", {"name": "shout"})).success
        [v2] = rig.listed()
        assert v2 != v1
        await rig.invoke("write_tool", {"name": "other", "code": tool_source("other")})
        assert rig.listed() == [v2]  # another tool's write leaves current versions alone

        # a call in flight keeps its copy through write_tool; it goes when the call ends
        rig.backend.push(FakeResponse(stdout=OK.stdout, delay_s=1.0))
        running = asyncio.create_task(rig.invoke("test_tool", {"name": "shout"}))
        while not rig.backend.running:
            await asyncio.sleep(0.01)
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout", 3)})
        assert rig.listed() == [v2]
        assert (await running).success
        assert rig.listed() == []

        assert (await rig.invoke("test_tool", {"name": "shout"})).success
        assert len(rig.listed()) == 1
        await rig.invoke("delete_tool", {"name": "shout"})
        assert rig.listed() == []
    finally:
        await rig.services.close()
        await rig.audit.close()


def test_collect_never_removes_a_copy_a_call_holds(tmp_path: Path) -> None:
    objects = ToolObjects(tmp_path / ".objects")
    nothing: Any = lambda tenant, size, also: contextlib.nullcontext()  # noqa: E731
    copy = objects.acquire("t1", b"print(1)\n", nothing)
    again = objects.acquire("t1", b"print(1)\n", nothing)
    assert copy == again and copy.read_bytes() == b"print(1)\n"
    assert objects.collect("t1", current=[]) == 0 and copy.exists()
    objects.release("t1", copy)
    assert copy.exists()  # one call still holds it
    objects.release("t1", copy)
    assert not copy.exists()  # not current: it went with its last call
    # a call that read its bytes before write_tool replaced them makes its copy after
    # the collect: it runs, and its copy goes when it ends
    late = objects.acquire("t1", b"print(0)\n", nothing)
    objects.release("t1", late)
    assert not late.exists()
    digest = content_hash(b"print(2)\n")
    assert objects.collect("t1", current=[digest]) == 0
    kept = objects.acquire("t1", b"print(2)\n", nothing)
    objects.release("t1", kept)
    assert kept.exists() and kept.name == f"{digest}.py"  # current: kept for the next call
    (tmp_path / ".objects" / ("0" * 64 + ".py")).write_text("old shared layout")
    assert objects.tenants() == ["t1"]
    assert not (tmp_path / ".objects" / ("0" * 64 + ".py")).exists()


async def test_start_up_removes_copies_nothing_refers_to(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout")})
        assert (await rig.invoke("test_tool", {"name": "shout"})).success
        [kept] = rig.listed()
        (rig.copies / ("e" * 64 + ".py")).write_text("left by an older server")
        assert rig.services.user_tools.store.collect_all() == 1
        assert rig.listed() == [kept]
    finally:
        await rig.services.close()
        await rig.audit.close()


needs_disks = pytest.mark.skipif(not loop_mounts_available(),
                                 reason="needs root and loop devices (session disks)")


@needs_disks
async def test_copies_count_in_the_tenant_disk_quota(tmp_path: Path) -> None:
    """A 32 MiB quota holds one 16 MiB session and a second one, but not a second one and a
    tool copy; and with both sessions made, the copy is refused before it is written. The
    sessions are in use meanwhile (an open workspace, as a call holds): an idle one would be
    released for room (tests/unit/test_idle_disks.py), so the refusals are 429s."""
    rig = await make_rig(tmp_path, disks=True, tenant_disk_mb=32, session_disk_mb=16)
    ws = rig.workspaces
    limit = 32 * MiB
    held = []
    try:
        ws.create(TENANT, "s_" + "1" * 16, disk_bytes=16 * MiB, tenant_disk_bytes=limit)
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout")})
        assert (await rig.invoke("test_tool", {"name": "shout"})).success
        assert rig.services.user_tools.store.objects.tenant_bytes(TENANT) >= 4096
        held.append(ws.open(TENANT, "s_" + "1" * 16))
        with pytest.raises(DiskQuotaBusy):  # 16 + 16 MiB + the copy > 32 MiB
            ws.create(TENANT, "s_" + "2" * 16, disk_bytes=16 * MiB, tenant_disk_bytes=limit)

        await rig.invoke("delete_tool", {"name": "shout"})
        assert rig.listed() == []
        ws.create(TENANT, "s_" + "2" * 16, disk_bytes=16 * MiB, tenant_disk_bytes=limit)
        held.append(ws.open(TENANT, "s_" + "2" * 16))
        await rig.invoke("write_tool", {"name": "shout", "code": tool_source("shout")})
        with pytest.raises(DiskQuotaBusy):  # the quota is full: no copy, nothing runs
            await rig.invoke("test_tool", {"name": "shout"})
        assert rig.listed() == [] and len(rig.backend.requests) == 1
        [denied] = await rig.audit.records(kind="denied")
        assert denied.rule == "quotas.tenant_disk_mb" and denied.tool == "shout"
    finally:
        for workspace in held:
            workspace.close()
        for session in ("1", "2"):
            ws.remove(TENANT, "s_" + session * 16)
        ws.close()
        await rig.services.close()
        await rig.audit.close()
