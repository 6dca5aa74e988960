"""`navi serve` killed with SIGKILL while a process serves a port: the next server adopts the
process, and its port is reachable again through the same relay (which reconnects to the
sockets the new server binds at the same paths), and its preview link works again (kept in
the database; its secret, derived from the link's id with the server's key, is the same)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.docker.test_ports_api import APP, PORT, origin_get
from tests.docker.test_processes_api import info, session_of, start, wait_for
from tests.e2e.conftest import start_server, stop_server

pytestmark = pytest.mark.docker


def test_an_adopted_process_serves_its_port_again(tmp_path: Path) -> None:
    first = start_server(tmp_path, ready_s=120)
    try:
        _, token = first.tenant_with_user()
        with first.client(token) as client:
            session = session_of(client)
            assert client.put(f"/v1/sessions/{session}/files/port_app.py",
                              content=APP.encode()).status_code == 201
            pid = start(client, session, f"exec python3 port_app.py {PORT}",
                        ports=[PORT])["id"]
            wait_for(lambda: client.get(f"/v1/sessions/{session}/ports/{PORT}/x"
                                        ).status_code == 200, 60, "the port to answer")
            link = client.post(f"/v1/sessions/{session}/previews", json={"port": PORT}).json()
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    finally:
        stop_server(first)
    second = start_server(tmp_path, ready_s=120)
    try:
        with second.client(token) as client:
            assert info(client, session, pid)["state"] == "running"
            answer = wait_for(lambda: (r := client.get(
                f"/v1/sessions/{session}/ports/{PORT}/again")).status_code == 200 and r,
                30, "the adopted process's port to answer again")
            assert answer.text == "hello /again"
            [listed] = client.get(f"/v1/sessions/{session}/previews").json()
            assert listed["id"] == link["id"] and listed["expires_at"] == link["expires_at"]
            label = httpx.URL(link["url"]).host.split(".")[0]
            assert httpx.URL(listed["url"]).host.split(".")[0] == label  # the same secret
            page = origin_get(second, listed["url"], "/after")  # no bearer token
            assert page.status_code == 200 and page.text == "hello /after"
            assert client.delete(f"/v1/sessions/{session}/processes/{pid}").status_code == 204
            assert client.get(f"/v1/sessions/{session}/ports/{PORT}/x").status_code == 404
            assert wait_for(lambda: origin_get(second, listed["url"], "/x").status_code == 404,
                            30, "the link to end with its process")
            assert client.get(f"/v1/sessions/{session}/previews").json() == []
    finally:
        stop_server(second)
