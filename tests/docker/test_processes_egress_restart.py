"""A process granted egress outlives a `navi serve` killed with SIGKILL: the next server
adopts it and serves its egress proxy again (same allowlist, a fresh socket behind the same
link in the directory its container mounts), so its requests go on; its stdin is closed
(the engine closed it with the old server's attach: `input` answers 409)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.docker.test_processes_api import info, output, session_of, start, wait_for
from tests.e2e.conftest import start_server, stop_server

pytestmark = pytest.mark.docker

POLICY = """
version: 1
images: {code_exec: python, terminal: python}
network: {egress_allowlist: [127.0.0.1]}
roles:
  user: {run_tools: true}
  admin: {run_tools: true, read_audit: true, manage: true}
  tenant_admin: {run_tools: true, read_audit: true, manage: true}
profiles:
  developer:
    roles: [user, tenant_admin, admin]
    allow: [group:exec, group:fs]
    tools:
      terminal: {network: egress, egress: [127.0.0.1]}
tenants:
  "*": {profiles: [developer], default_profile: developer}
"""
FETCHER = """
import time, urllib.request
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:%d/hit", timeout=5).read().decode()
        print("ok", body, flush=True)
    except Exception as exc:
        print("err", type(exc).__name__, exc, flush=True)
    time.sleep(0.3)
"""


class Counter(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:  # noqa: N802
        Counter.hits += 1
        body = str(Counter.hits).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counter() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_adopted_process_keeps_its_egress(tmp_path: Path,
                                             counter: ThreadingHTTPServer) -> None:
    port = counter.server_address[1]
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    env = {"NAVI_EGRESS_ALLOW_LOOPBACK": "1", "NAVI_EGRESS_PORTS": json.dumps([port])}
    first = start_server(tmp_path, policy=policy, extra_env=env, ready_s=120)
    try:
        _, token = first.tenant_with_user()
        with first.client(token) as client:
            session = session_of(client)
            assert client.put(f"/v1/sessions/{session}/files/fetch.py",
                              content=(FETCHER % port).encode()).status_code == 201
            pid = start(client, session, "exec python3 -u fetch.py")["id"]
            wait_for(lambda: "ok 2" in output(client, session, pid)["output"], 60,
                     "requests through the egress proxy")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    finally:
        stop_server(first)
    second = start_server(tmp_path, policy=policy, extra_env=env, ready_s=120)
    try:
        with second.client(token) as client:
            adopted = info(client, session, pid)
            assert adopted["state"] == "running", adopted
            seen = Counter.hits
            wait_for(lambda: Counter.hits >= seen + 3, 30,
                     "the adopted process's requests to pass its new proxy")
            assert "ok" in output(client, session, pid)["output"].splitlines()[-1]
            refused = client.post(f"/v1/sessions/{session}/processes/{pid}/input",
                                  json={"data": "x\n"})
            assert refused.status_code == 409, refused.text
            assert client.delete(f"/v1/sessions/{session}/processes/{pid}").status_code == 204
        assert not (second.data_dir / "egress" / "proc" / pid).exists()
    finally:
        stop_server(second)
