"""A node asks its control plane what a tenant holds elsewhere before it mounts an idle
session's disk again or copies on it (`runtime.cluster.agent.asks`): the question and the
answer are validated on both ends (`ElsewhereAsk`, `ElsewhereAnswer`), the asking thread
gets the answer (or, with no control plane listening or answering, the last figure it was
told), and a remount on real loop-mounted disks is refused on what the answer says."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.cluster.agent.asks import ElsewhereAsks
from runtime.errors import DiskQuotaBusy, DiskQuotaExceeded, InvalidInput
from runtime.nodes.elsewhere_wire import ElsewhereAnswer, ElsewhereAsk
from runtime.nodes.wire import MAX_BYTES, HeldBytes, parsed
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity
from runtime.workspace.disk import NOTHING, SessionDisks, TenantBytes, loop_mounts_available

MiB = 1024 * 1024
SIZE = 32 * MiB
ASK = "0123456789abcdef"


def test_a_question_and_its_answer_cross_as_json() -> None:
    tenant = new_tenant_id()
    asked = parsed(ElsewhereAsk, ElsewhereAsk(ask=ASK, tenant=tenant).model_dump_json())
    assert (asked.ask, asked.tenant) == (ASK, tenant)
    answer = ElsewhereAnswer(ask=ASK, held=HeldBytes(in_use=SIZE, at_rest=5))
    assert parsed(ElsewhereAnswer, answer.model_dump_json()).held.bytes() == \
        TenantBytes(SIZE, 5)


@pytest.mark.parametrize("body", [
    {"ask": ASK, "tenant": "../t_0000000000000001"},
    {"ask": ASK, "tenant": "/etc"},
    {"ask": "../x", "tenant": "TENANT"},
    {"ask": ASK.upper(), "tenant": "TENANT"},
    {"ask": ASK, "tenant": "TENANT", "path": "/etc"},
    {"ask": ASK, "tenant": "TENANT", "node": "n2"},
    {"tenant": "TENANT"},
])
def test_a_malformed_question_is_refused(body: dict[str, str]) -> None:
    body = {k: new_tenant_id() if v == "TENANT" else v for k, v in body.items()}
    with pytest.raises(InvalidInput):
        parsed(ElsewhereAsk, json.dumps(body))


@pytest.mark.parametrize("held", [
    {"in_use": -1, "at_rest": 0}, {"in_use": MAX_BYTES + 1}, {"in_use": 1.5},
    {"in_use": 1, "node": "n2"}, "lots", [1, 2],
])
def test_a_forged_answer_is_refused(held: object) -> None:
    with pytest.raises(InvalidInput, match="refused node request: held"):
        parsed(ElsewhereAnswer, json.dumps({"ask": ASK, "held": held}))
    with pytest.raises(InvalidInput):
        parsed(ElsewhereAnswer, json.dumps({"ask": ASK, "held": {}, "extra": 1}))


async def test_the_asking_thread_gets_the_control_planes_answer() -> None:
    asks, tenant = ElsewhereAsks(timeout_s=5), new_tenant_id()
    seen: list[str] = []

    async def control_plane() -> None:  # what `runtime.cluster.control.asks` does
        async for raw in asks.listen():
            question = parsed(ElsewhereAsk, raw)
            seen.append(question.tenant)
            asks.answer(ElsewhereAnswer(ask=question.ask, held=HeldBytes(
                in_use=3 * SIZE, at_rest=SIZE)).model_dump_json().encode())

    listening = asyncio.create_task(control_plane())
    await asyncio.sleep(0.05)
    try:
        assert await asyncio.to_thread(asks.ask, tenant) == TenantBytes(3 * SIZE, SIZE)
        assert seen == [tenant]
        assert asks.last(tenant) == TenantBytes(3 * SIZE, SIZE)  # kept for a later fallback
        assert asks.ask(tenant) == TenantBytes(3 * SIZE, SIZE)  # on the loop: never waits
        assert seen == [tenant]
        asks.answer(ElsewhereAnswer(ask=ASK, held=HeldBytes()).model_dump_json())  # none
    finally:
        listening.cancel()


async def test_without_an_answer_the_last_figure_told_counts() -> None:
    asks, tenant = ElsewhereAsks(timeout_s=0.2), new_tenant_id()
    assert await asyncio.to_thread(asks.ask, tenant) == TenantBytes()  # no listener
    asks.told(tenant, TenantBytes(SIZE, 7))  # a create's figure
    assert await asyncio.to_thread(asks.ask, tenant) == TenantBytes(SIZE, 7)

    async def silent() -> None:
        async for _question in asks.listen():
            pass  # a control plane that never answers

    listening = asyncio.create_task(silent())
    await asyncio.sleep(0.05)
    try:
        assert await asyncio.to_thread(asks.ask, tenant) == TenantBytes(SIZE, 7)
    finally:
        listening.cancel()


@pytest.fixture
def elsewhere() -> dict[str, TenantBytes]:
    """What the machine below is told the tenant holds on other machines."""
    return {"held": NOTHING}


@pytest.fixture
def machine(tmp_path: Path, elsewhere: dict[str, TenantBytes]) -> Iterator[Workspaces]:
    if not loop_mounts_available():
        pytest.skip("needs root and loop devices")
    made = Workspaces(tmp_path / "a", disks=SessionDisks(tmp_path / "a", reserve_bytes=0),
                      activity=Activity(idle_s=0.05),
                      elsewhere=lambda tenant_id: elsewhere["held"])
    yield made
    made.close()


def test_a_disk_mounted_again_counts_what_the_tenant_holds_elsewhere(
    machine: Workspaces, elsewhere: dict[str, TenantBytes],
) -> None:
    tenant, session, limit = new_tenant_id(), new_session_id(), 2 * SIZE
    machine.create(tenant, session, uid=200000, disk_bytes=SIZE, tenant_disk_bytes=limit)
    with machine.open(tenant, session) as files:
        files.write_bytes("big", os.urandom(8 * MiB))
    assert machine.release(tenant, session, only_idle=False)
    elsewhere["held"] = TenantBytes(SIZE + MiB, 2 * MiB)  # another node's session in use
    with pytest.raises(DiskQuotaBusy):  # it would fit once that one is idle
        machine.open(tenant, session)
    elsewhere["held"] = TenantBytes(SIZE + MiB, SIZE + MiB)  # at rest it holds as much
    with pytest.raises(DiskQuotaExceeded, match="64 MiB"):
        machine.open(tenant, session)
    with pytest.raises(DiskQuotaExceeded):  # a snapshot's copy on the disk counts it too
        with machine.admitting(tenant, 24 * MiB, 0, limit, data_disk=True):
            pass
    elsewhere["held"] = TenantBytes(SIZE - MiB, SIZE - MiB)
    with machine.open(tenant, session) as files:
        assert files.stat("big").size == 8 * MiB
