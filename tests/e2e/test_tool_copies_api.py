"""A real `navi serve` and Docker: user tools' copies live per tenant, go when their version
is replaced, and count in the tenant's disk quota (a full quota refuses the copy before it
is written)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from runtime.config import PROJECT_ROOT
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker


def tool(version: int) -> str:
    return ('name = "probe"\ndescription = "d"\nparameters = {"type": "object"}\n'
            f"async def execute(params):\n    return 'v{version}'\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("copies")
    policy = yaml.safe_load((PROJECT_ROOT / "policies" / "default.yaml").read_text())
    policy["defaults"]["quotas"].update(session_disk_mb=16, tenant_disk_mb=32)
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    srv = start_server(tmp, policy=path, extra_env={"NAVI_DISK_OVERCOMMIT": "1"})
    yield srv
    stop_server(srv)


def call(server: Server, token: str, session: str, tool_name: str, args: dict):  # noqa: ANN201
    with server.client(token) as client:
        return client.post(f"/v1/sessions/{session}/exec", json={"tool": tool_name, "args": args})


def running_in(server: Server, tenant: str, session: str) -> bool:
    """Whether a call of ``session`` has its intent written (it holds the session's disk)."""
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    return any(r["kind"] == "intent" for r in records)


def copies(server: Server, tenant: str) -> list[str]:
    where = Path(server.data_dir) / "tools" / ".objects" / tenant
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def test_copies_are_per_tenant_and_go_with_their_version(server: Server) -> None:
    tenant, token = server.tenant_with_user()
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
    assert call(server, token, session, "write_tool", {"name": "probe", "code": tool(1)}).json()[
        "ok"]
    ran = call(server, token, session, "test_tool", {"name": "probe"})
    assert ran.status_code == 200 and ran.json()["ok"], ran.text
    assert ran.json()["output"] == "v1"
    [v1] = copies(server, tenant)
    call(server, token, session, "write_tool", {"name": "probe", "code": tool(2)})
    assert copies(server, tenant) == []
    ran = call(server, token, session, "test_tool", {"name": "probe"})
    assert ran.json()["output"] == "v2" and copies(server, tenant) != [v1]
    call(server, token, session, "delete_tool", {"name": "probe"})
    assert copies(server, tenant) == []


def test_a_tenant_at_its_disk_quota_gets_no_copy(server: Server) -> None:
    """Both sessions in use (the test_tool call holds the first, a sleeping call the second):
    16 + 16 MiB fill the quota and neither can be released for room, so the copy is refused
    with 429 before it is written (an idle second session would be released instead)."""
    tenant, token = server.tenant_with_user()
    with server.client(token) as client:
        first = client.post("/v1/sessions", json={}).json()["id"]
        second = client.post("/v1/sessions", json={})  # 2 x 16 MiB: the quota is full
        assert second.status_code == 201, second.text
    call(server, token, first, "write_tool", {"name": "probe", "code": tool(1)})
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(call, server, token, second.json()["id"], "terminal",
                           {"command": "sleep 8"})
        deadline = time.monotonic() + 30
        while not running_in(server, tenant, second.json()["id"]):
            assert time.monotonic() < deadline and not busy.done(), "the sleep never ran"
            time.sleep(0.1)
        refused = call(server, token, first, "test_tool", {"name": "probe"})
        assert busy.result().json()["ok"]
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "disk_quota"
    assert refused.headers.get("Retry-After")
    assert copies(server, tenant) == []
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": first}).json()
    [denied] = [r for r in records if r["kind"] == "denied"]
    assert denied["rule"] == "quotas.tenant_disk_mb" and denied["tool"] == "probe"
    assert not [r for r in records if r["kind"] == "intent"]
