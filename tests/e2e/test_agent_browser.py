"""The `browser` tool through a real agent turn: a real `navi serve`, the scripted fake model,
a real container of the `navi/browser` image (built first if missing: it is built on demand)
and a page on the host's 127.0.0.1 that writes its text with JavaScript, reached through the
egress proxy under the policy's web grant. The model reads the rendered text, then takes a
screenshot, which lands in the session's files.

Egress: the policy grants the IP literal 127.0.0.1 (an allowlisted literal is never looked
up) on the page's port only, and the server lets the proxy reach loopback
(NAVI_EGRESS_ALLOW_LOOPBACK, tests only). Nothing here talks to another address."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runtime.sandbox.docker.images import build_images
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import new_session, send, watch
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PAGE = ("<!doctype html><html><head><title>Live board</title></head><body><h1>Board</h1>"
        "<div id=out></div><script>document.getElementById('out').textContent = "
        "'Open tickets: ' + [3, 4].reduce((a, b) => a + b);</script></body></html>")
PROFILE = """description: browser test agent
max_iterations: 6
context_window: 16384
tools: [browser, filesystem]
system_prompt: You are the test agent.
"""


POLICY = """
version: 1
defaults:
  limits: {timeout_s: 60, max_timeout_s: 120, memory_mb: 1024, pids: 512, tmp_mb: 256}
  quotas: {max_concurrent: 4, execs_per_minute: 1000}
images: {browser: browser}
network: {egress_allowlist: [127.0.0.1]}
roles:
  user: {run_tools: true}
  admin: {run_tools: true, read_audit: true, manage: true}
profiles:
  developer:
    roles: [user, admin]
    allow: [browser, group:fs]
    tools:
      browser: {network: egress, egress: [127.0.0.1]}
tenants:
  "*": {profiles: [developer], default_profile: developer}
"""


@pytest.fixture(scope="module")
def page_port() -> Iterator[int]:
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama,
           page_port: int) -> Iterator[Server]:
    build_images(["browser"])  # on demand: built here when missing or stale
    tmp = tmp_path_factory.mktemp("browser")
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(PROFILE)
    (tmp / "policy.yaml").write_text(POLICY)
    srv = start_server(tmp, policy=tmp / "policy.yaml", ready_s=120, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(profiles),
        "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off",
        "NAVI_EGRESS_ALLOW_LOOPBACK": "1", "NAVI_EGRESS_PORTS": json.dumps([page_port])})
    yield srv
    stop_server(srv)


def test_the_agent_reads_a_scripted_page_and_screenshots_it(
        server: Server, ollama: FakeOllama, page_port: int) -> None:
    _, user = server.tenant_with_user()
    session = new_session(server, user)
    url = f"http://127.0.0.1:{page_port}/board"
    ollama.model.add(
        Reply(calls=[Call("browser", {"url": url})]),
        Reply(calls=[Call("browser", {"url": url, "action": "screenshot"})]),
        Reply(content="There are 7 open tickets."))
    send(server, user, session, "how many tickets are open?")
    events = watch(server, user, session, timeout=180)
    assert events[-1]["type"] == "stream_end", events[-1]
    text, shot = [e for e in events if e["type"] == "tool_result"]
    assert text["success"] is True, text
    assert "Open tickets: 7" in text["output"]  # written by the page's script
    assert text["output"].startswith(f"Title: Live board\nURL: {url}")
    assert shot["success"] is True, shot
    (image,) = shot["images"]
    assert image["path"].startswith("screenshots/") and image["media_type"] == "image/png"
    with server.client(user) as client:
        saved = client.get(f"/v1/sessions/{session}/files/{image['path']}")
    assert saved.status_code == 200 and saved.content.startswith(b"\x89PNG")
    assert events[-1]["content"] == "There are 7 open tickets."
