"""Warm containers behind a real `navi serve`: used by exec, dropped by DELETE /v1/sessions;
with the tenant's pool (the default), a new session's first call runs warm, a brand-new
tenant's included (its pool fills when the session is created)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """The per-session pool (the tenant's pool off)."""
    srv = start_server(tmp_path, extra_env={"NAVI_WARM_POOL_SIZE": "1",
                                            "NAVI_WARM_LATE_BIND": "false"})
    yield srv
    stop_server(srv)


@pytest.fixture
def pooled_server(tmp_path: Path) -> Iterator[Server]:
    """The defaults: the tenant's pool for runc calls."""
    srv = start_server(tmp_path, extra_env={"NAVI_WARM_POOL_SIZE": "1"}, ready_s=120)
    yield srv
    stop_server(srv)


def session_containers(api: docker.APIClient, session: str) -> list[dict]:
    return api.containers(all=True, filters={"label": f"navi.session={session}"})


def wait_for(check, within_s: float = 20) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def bound_under(root: Path) -> list[str]:
    """Host mounts below the bind root (a pooled container's session binds)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4] for line in fh]
    depth = str(root).count("/") + 1  # <root>/<slot> is a directory, <root>/<slot>/x a bind
    return [p for p in points if p.startswith(f"{root}/") and p.count("/") > depth]


def test_delete_session_removes_its_warm_container(
    server: Server, docker_api: docker.APIClient
) -> None:
    _, token = server.tenant_with_user()
    body = {"tool": "code_exec", "args": {"language": "python", "code": "print(6 * 7)"}}
    with server.client(token) as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        first = client.post(f"/v1/sessions/{session}/exec", json=body)
        assert first.status_code == 200 and first.json()["stdout"] == "42\n"
        assert wait_for(lambda: len(session_containers(docker_api, session)) == 1)
        warm_id = session_containers(docker_api, session)[0]["Id"]
        second = client.post(f"/v1/sessions/{session}/exec", json=body)
        assert second.status_code == 200 and second.json()["stdout"] == "42\n"
        assert wait_for(lambda: warm_id not in {c["Id"] for c in
                                                session_containers(docker_api, session)})
        assert '"warm": true' in server.log(), "the second call should have run warm"
        # one, or two if the second call had to wait for its container (the depth grows)
        assert wait_for(lambda: len(session_containers(docker_api, session)) >= 1)
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
    assert session_containers(docker_api, session) == []


def test_a_new_sessions_first_call_runs_warm_and_delete_unbinds_it(
    pooled_server: Server, docker_api: docker.APIClient
) -> None:
    server = pooled_server
    tenant, token = server.tenant_with_user()
    body = {"tool": "code_exec", "args": {"language": "python", "code": "print(6 * 7)"}}

    def pooled() -> list[dict]:
        found = docker_api.containers(filters={"label": f"navi.tenant={tenant}"})
        return [c for c in found if c["Labels"].get("navi.session") == ""]

    with server.client(token) as client:
        # a brand-new tenant's first session: its pool fills from the create, so its very
        # first call runs warm (runtime.executor.prewarm)
        assert pooled() == []
        first = client.post("/v1/sessions", json={}).json()["id"]
        assert wait_for(lambda: len(pooled()) == 1), "the create did not fill the pool"
        assert client.post(f"/v1/sessions/{first}/exec", json=body).json()["stdout"] == "42\n"
        assert server.log().count('"warm": true') == 1, "the tenant's first call ran cold"
        assert wait_for(lambda: len(pooled()) == 1)
        session = client.post("/v1/sessions", json={}).json()["id"]
        answer = client.post(f"/v1/sessions/{session}/exec", json=body)
        assert answer.status_code == 200 and answer.json()["stdout"] == "42\n"
        assert server.log().count('"warm": true') == 2, "a new session's first call ran cold"
        assert client.delete(f"/v1/sessions/{session}").status_code == 204
        roots = list((server.data_dir / "bind").iterdir())
        assert len(roots) == 1
        assert wait_for(lambda: bound_under(roots[0]) == [])
