"""A real `navi serve`: one tenant flooding allowed changes (empty uploads, deletes,
snapshots' cousins) gets 429 `change_rate` with Retry-After past its burst, a bounded number
of audit records, and the data disk's audit log grows by a bounded amount; another tenant's
changes go on as before."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Server, start_server, stop_server

BURST, RATE, REFUSALS = 30, 5.0, 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("changes"), extra_env={
        "NAVI_CHANGE_BURST": str(BURST), "NAVI_CHANGE_RATE": str(RATE),
        "NAVI_REFUSAL_BURST": str(REFUSALS), "NAVI_EMBEDDED_MODEL": "off"}, ready_s=120)
    yield srv
    stop_server(srv)


def _audit_bytes(server: Server) -> int:
    return (server.data_dir / "audit.jsonl").stat().st_size


def test_a_flood_of_allowed_changes_is_rate_limited(server: Server) -> None:
    flooder, token = server.tenant_with_user()
    _, other_token = server.tenant_with_user()
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        before = _audit_bytes(server)
        statuses: list[int] = []
        started = time.monotonic()
        for i in range(200):
            resp = client.put(f"/v1/sessions/{session}/files/e{i}", content=b"")
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                limited = resp
        elapsed = time.monotonic() - started
        deletes = [client.delete(f"/v1/sessions/{session}/files/e{i}").status_code
                   for i in range(BURST)]  # the bucket is empty: more than it refills meanwhile
        total = time.monotonic() - started
        grown = _audit_bytes(server) - before
    assert statuses[:BURST] == [201] * BURST
    assert statuses.count(201) <= BURST + RATE * elapsed + 1, elapsed
    assert statuses.count(429) >= 200 - BURST - RATE * elapsed - 1
    error = limited.json()["error"]
    assert error["code"] == "change_rate" and "slow down" in error["message"]
    assert int(limited.headers["Retry-After"]) >= 1
    assert 429 in deletes and set(deletes) <= {204, 429}, deletes  # deletes are changes too
    with server.client(server.token_for(flooder, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    writes = [r for r in records if r.get("action") == "file.write"]
    denied = [r for r in records if r["kind"] == "denied"]
    assert len(writes) == statuses.count(201)
    assert 1 <= len(denied) <= REFUSALS + 5.0 * total + 1  # the refusal rate's default
    assert {r["rule"] for r in denied} == {"limits.change_rate"}
    # bounded: the writes allowed and the refusals recorded, not 200 + 1 records
    assert 0 < grown < (len(writes) + deletes.count(204) + len(denied) + 20) * 1500, grown
    print(f"200 uploads in {elapsed:.2f} s: {statuses.count(201)} written, "
          f"{len(denied)} refusals recorded, audit +{grown} bytes")
    with server.client(other_token) as client:  # another tenant is untouched
        theirs = client.post("/v1/sessions", json={}).json()["id"]
        for i in range(5):
            resp = client.put(f"/v1/sessions/{theirs}/files/x{i}", content=b"x")
            assert resp.status_code == 201, resp.text
