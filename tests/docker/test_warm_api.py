"""Warm containers behind a real `navi serve`: used by exec, dropped by DELETE /v1/sessions."""

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
    srv = start_server(tmp_path, extra_env={"NAVI_WARM_POOL_SIZE": "1"})
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
