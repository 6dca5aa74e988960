"""A tenant's disk quota across machines (`runtime.nodes.elsewhere`): what crosses the hop
for it is validated on both ends (`TenantOf`, `HeldBytes`, `CreateDisk.elsewhere`), the
control plane adds up every other machine's bytes, and a machine admits a session disk
against its own bytes plus those (real loop-mounted disks, two `Workspaces` as two
machines)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.errors import DiskQuotaBusy, DiskQuotaExceeded, InvalidInput
from runtime.nodes import LocalNode, Nodes, NodeTable
from runtime.nodes.elsewhere import held_elsewhere
from runtime.nodes.wire import MAX_BYTES, CreateDisk, HeldBytes, TenantOf, parsed
from runtime.sandbox.fake import FakeBackend
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity
from runtime.workspace.disk import SessionDisks, TenantBytes, loop_mounts_available

MiB = 1024 * 1024
SIZE = 32 * MiB


def test_a_create_carries_what_the_tenant_holds_elsewhere() -> None:
    made = CreateDisk(tenant=new_tenant_id(), session=new_session_id(), disk_bytes=SIZE,
                      tenant_disk_bytes=2 * SIZE, elsewhere=HeldBytes(in_use=SIZE, at_rest=7))
    back = parsed(CreateDisk, made.model_dump_json().encode())
    assert back.elsewhere.bytes() == TenantBytes(SIZE, 7)
    plain = {"tenant": made.tenant, "session": made.session}
    assert parsed(CreateDisk, json.dumps(plain)).elsewhere.bytes() == TenantBytes(0, 0)


@pytest.mark.parametrize("elsewhere", [
    {"in_use": -1, "at_rest": 0}, {"in_use": 0, "at_rest": -5}, {"in_use": MAX_BYTES + 1},
    {"in_use": "1e30"}, {"in_use": 1.5}, {"in_use": 1, "node": "n2"}, [1, 2], "lots",
])
def test_a_forged_elsewhere_figure_is_refused(elsewhere: object) -> None:
    body = {"tenant": new_tenant_id(), "session": new_session_id(), "elsewhere": elsewhere}
    with pytest.raises(InvalidInput, match="refused node request: elsewhere"):
        parsed(CreateDisk, json.dumps(body))


@pytest.mark.parametrize("tenant", ["../t_0000000000000001", "/etc", "t_1/../../x", "", "x" * 200])
def test_a_tenant_bytes_request_names_a_tenant_id_only(tenant: str) -> None:
    with pytest.raises(InvalidInput, match="refused node request|malformed tenant id"):
        parsed(TenantOf, json.dumps({"tenant": tenant}))
    with pytest.raises(InvalidInput):
        parsed(TenantOf, json.dumps({"tenant": new_tenant_id(), "path": "/etc"}))
    tenant_id = new_tenant_id()
    assert parsed(TenantOf, TenantOf(tenant=tenant_id).model_dump_json()).tenant == tenant_id


def test_a_nodes_answer_is_checked_too() -> None:
    assert parsed(HeldBytes, b'{"in_use": 9, "at_rest": 3}').bytes() == TenantBytes(9, 3)
    for answer in (b'{"in_use": -9}', b"[9, 3]", {"in_use": 9}, b"\x80\x04pickle"):
        with pytest.raises(InvalidInput):
            parsed(HeldBytes, answer)


def _machines(tmp_path: Path, also: dict[str, int]) -> Nodes:
    """Nodes whose tenant bytes are only `also` (no session disks): local and n2, n3."""
    def spaces(name: str) -> Workspaces:
        return Workspaces(tmp_path / name, count_also=lambda tenant_id: also[name])

    table = NodeTable(LocalNode(spaces("local"), FakeBackend()))
    for name in ("n2", "n3"):
        table.add(LocalNode(spaces(name), FakeBackend(), node_id=name))
    return Nodes(table)


async def test_elsewhere_is_every_other_machine_and_a_gone_one_still_counts(
    tmp_path: Path,
) -> None:
    nodes = _machines(tmp_path, {"local": 1 * MiB, "n2": 2 * MiB, "n3": 4 * MiB})
    tenant = new_tenant_id()
    got = await held_elsewhere(nodes, tenant, nodes.get("n2"), {"n2": 1, "n3": 1}, SIZE)
    assert got == TenantBytes(5 * MiB, 5 * MiB)  # the control plane's own and n3's
    assert await held_elsewhere(nodes, tenant, nodes.local, {}, SIZE) == \
        TenantBytes(6 * MiB, 6 * MiB)
    nodes.discard("n3")  # n3 leaves the cluster with the tenant's disks on it
    # its last answer counts; a node never asked counts its sessions at a full disk each
    got = await held_elsewhere(nodes, tenant, nodes.get("n2"), {"n3": 0, "n9": 2}, SIZE)
    assert got == TenantBytes(1 * MiB + 4 * MiB + 2 * SIZE, 1 * MiB + 4 * MiB + 2 * SIZE)
    assert await held_elsewhere(nodes, tenant, nodes.get("n2"), {"n3": 3}, SIZE) == \
        TenantBytes(1 * MiB + 3 * SIZE, 1 * MiB + 3 * SIZE)
    alone = Nodes(NodeTable(LocalNode(Workspaces(tmp_path / "one"), FakeBackend())))
    assert await held_elsewhere(alone, tenant, alone.local, {"local": 5}, SIZE) == \
        TenantBytes()


@pytest.fixture
def two_machines(tmp_path: Path) -> Iterator[tuple[Workspaces, Workspaces]]:
    if not loop_mounts_available():
        pytest.skip("needs root and loop devices")
    made = []
    for name in ("a", "b"):
        root = tmp_path / name
        made.append(Workspaces(root, disks=SessionDisks(root, reserve_bytes=0),
                               activity=Activity(idle_s=0.05)))
    yield made[0], made[1]
    for ws in made:
        ws.close()


def test_a_machine_admits_against_the_tenants_disks_on_the_others(
    two_machines: tuple[Workspaces, Workspaces],
) -> None:
    a, b = two_machines
    tenant, limit = new_tenant_id(), 2 * SIZE  # room for two sessions' disks
    s1, s2, s3 = (new_session_id() for _ in range(3))
    a.create(tenant, s1, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit)
    b.create(tenant, s2, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit,
             elsewhere=a.tenant_bytes(tenant))
    with pytest.raises(DiskQuotaBusy):  # a's session in use: it would fit once idle
        b.create(tenant, s3, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit,
                 elsewhere=a.tenant_bytes(tenant))
    for ws, session in ((a, s1), (b, s2)):  # both hold most of their disk
        with ws.open(tenant, session) as files:
            files.write_bytes("big", os.urandom(22 * MiB))
    with pytest.raises(DiskQuotaExceeded, match="64 MiB"):
        b.create(tenant, s3, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit,
                 elsewhere=a.tenant_bytes(tenant))
    assert not (b.root / tenant / f"{s3}.img").exists()
    a.remove(tenant, s1)
    b.create(tenant, s3, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit,
             elsewhere=a.tenant_bytes(tenant))
