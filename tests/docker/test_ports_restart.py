"""`navi serve` killed with SIGKILL while a process serves a port: the next server adopts the
process, and its port is reachable again through the same relay (which reconnects to the
sockets the new server binds at the same paths); preview links, kept in memory, are gone."""

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
            with pytest.raises(httpx.HTTPError):  # the old origin is gone with its server
                origin_get(second, link["url"], "/x")
            assert client.delete(f"/v1/sessions/{session}/processes/{pid}").status_code == 204
            assert client.get(f"/v1/sessions/{session}/ports/{PORT}/x").status_code == 404
    finally:
        stop_server(second)
