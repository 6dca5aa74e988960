"""A real `navi serve` and Docker: one tenant flooding refused calls gets 429 `refusal_rate`
past its burst, with a bounded number of audit records; another tenant's refusals and runs,
and the flooding tenant's own allowed calls, go on as before and are audited."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker

BURST, RATE = 20, 5.0
PY = {"tool": "code_exec", "args": {"language": "python", "code": "print(6 * 7)"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("flood"),
                       extra_env={"NAVI_REFUSAL_BURST": str(BURST),
                                  "NAVI_REFUSAL_RATE": str(RATE)})
    yield srv
    stop_server(srv)


def sessions(server: Server, token: str) -> tuple[str, str]:
    """(a developer session, a secretary session: code_exec is denied there)."""
    with server.client(token) as client:
        dev = client.post("/v1/sessions", json={}).json()["id"]
        sec = client.post("/v1/sessions", json={"profile": "secretary"}).json()["id"]
    return dev, sec


def test_a_refusal_flood_is_cut_off_before_the_audit(server: Server, tmp_path: Path) -> None:
    flooder, token = server.tenant_with_user()
    other, other_token = server.tenant_with_user()
    dev, sec = sessions(server, token)
    other_dev, other_sec = sessions(server, other_token)

    statuses: list[int] = []
    started = time.monotonic()
    with server.client(token) as client:
        for _ in range(300):
            resp = client.post(f"/v1/sessions/{sec}/exec", json=PY)
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                limited = resp
        # in the middle of the flood, the tenant's allowed call runs and is audited
        ran = client.post(f"/v1/sessions/{dev}/exec", json=PY)
    elapsed = time.monotonic() - started
    assert statuses[:BURST] == [403] * BURST
    assert statuses.count(429) >= 300 - BURST - RATE * elapsed - 1, elapsed
    error = limited.json()["error"]
    assert error["code"] == "refusal_rate" and error["message"]
    assert int(limited.headers["Retry-After"]) >= 1
    assert ran.status_code == 200, ran.text
    assert ran.json()["stdout"] == "42\n"

    with server.client(server.token_for(flooder, "auditor")) as auditor:
        denied = auditor.get("/v1/audit", params={"session": sec}).json()
        mine = auditor.get("/v1/audit", params={"exec_id": ran.json()["exec_id"]}).json()
    kinds = [r["kind"] for r in denied if r["kind"] != "action"]
    assert kinds.count("denied") == statuses.count(403) <= BURST + RATE * elapsed + 1
    assert [r["kind"] for r in mine] == ["intent", "outcome"]

    # the other tenant: its refusal is a 403 with a record, its call runs
    with server.client(other_token) as client:
        refused = client.post(f"/v1/sessions/{other_sec}/exec", json=PY)
        fine = client.post(f"/v1/sessions/{other_dev}/exec", json=PY)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "policy_denied"
    assert fine.status_code == 200 and fine.json()["stdout"] == "42\n"
    with server.client(server.token_for(other, "auditor")) as auditor:
        theirs = auditor.get("/v1/audit", params={"session": other_sec}).json()
    assert [r["kind"] for r in theirs if r["kind"] != "action"] == ["denied"]
    with server.client(server.admin_token) as admin:
        assert admin.get("/v1/audit/verify").json()["ok"] is True
