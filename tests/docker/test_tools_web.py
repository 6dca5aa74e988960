"""`http_request` and `web_view` end to end: registry -> Executor -> a real container -> the
call's egress proxy -> an HTTP server this test runs on the host's 127.0.0.1.

Only loopback traffic: the proxies may reach loopback because these tests turn
``allow_loopback`` on (as ``NAVI_EGRESS_ALLOW_LOOPBACK`` would) and resolve through a fixed
table (``localhost`` -> 127.0.0.1, anything else: no such name), never DNS.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import docker
import pytest

from runtime.audit import AuditLog
from runtime.egress import EgressConfig
from runtime.errors import PolicyDenied
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject, parse_policy
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.tools import ToolContext, ToolResult
from runtime.tools.builtin import HttpRequestTool, WebViewTool
from runtime.tools.registry import ToolRegistry
from tests.docker.sandbox_fixtures import sweep
from tests.fakes.calls import call
from tests.fakes.json_api import serving
from tests.fakes.resolver import LoopbackOnlyResolver

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]

PAGE = """<!doctype html><html><head><title>The  Test Page</title>
<style>body {{ color: red }}</style><script>var secret = "script text";</script></head>
<body><nav><a href="/nav-only">Navigation junk</a></nav>
<h1>Main heading</h1><p>First paragraph with a <a href="/about">relative link</a>.</p>
<p>Second &amp; last paragraph, see <a href="http://localhost:{port}/abs">absolute</a>.</p>
<ul><li>item one</li><li>item two</li></ul></body></html>"""


@dataclass
class Server:
    port: int
    hits: list[tuple[str, str]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    server_state: Server

    def _send(self, status: int, body: bytes, ctype: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        state = self.server_state
        state.hits.append(("GET", self.path))
        port = state.port
        if self.path == "/page":
            self._send(200, PAGE.format(port=port).encode(), "text/html; charset=utf-8")
        elif self.path == "/json":
            self._send(200, b'{"hello": "w\xc3\xb6rld"}', "application/json")
        elif self.path == "/latin1":
            self._send(200, "caf\u00e9".encode("latin-1"), "text/plain; charset=iso-8859-1")
        elif self.path == "/redirect-local":
            self._send(302, b"", "text/plain", Location="/page")
        elif self.path == "/redirect-away":
            self._send(302, b"", "text/plain",
                       Location=f"http://elsewhere.invalid:{port}/stolen")
        else:
            self._send(404, b"no such page", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server_state.hits.append(("POST", self.path))
        seen = {"body": body.decode(), "content_type": self.headers.get("Content-Type"),
                "x_test": self.headers.get("X-Test")}
        self.server_state.seen.append(seen)
        self._send(201, json.dumps(seen).encode(), "application/json")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[Server]:
    state = Server(port=0)
    handler = type("H", (Handler,), {"server_state": state})
    with serving(handler) as port:
        state.port = port
        yield state



POLICY = """
version: 1
images: {group:web: python}
network: {egress_allowlist: [localhost, elsewhere.invalid]}
profiles:
  web:
    allow: [group:web]
    tools:
      http_request: {network: egress, egress: [localhost]}
      web_view: {network: egress, egress: [localhost]}
tenants:
  "*": {profiles: [web], default_profile: web}
"""
SUBJECT = Subject(tenant="t1", user="u", session="s1", profile="web")


@dataclass
class Rig:
    registry: ToolRegistry
    executor: Executor
    audit: AuditLog
    resolver: LoopbackOnlyResolver

    async def call(self, tool: str, args: dict[str, Any],
                   subject: Subject = SUBJECT) -> ToolResult:
        ctx = ToolContext(subject=subject, executor=self.executor)
        return await call(self.registry, tool, args, ctx)

    async def kinds(self) -> list[tuple[str, str | None]]:
        return [(r.kind, r.rule) for r in await self.audit.records()]


async def make_rig(engine: PolicyEngine, backend: DockerBackend, image: str,
                   tmp_path: Path) -> AsyncIterator[Rig]:
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda _: image)
    registry = ToolRegistry([HttpRequestTool(), WebViewTool()], policy=engine)
    assert isinstance(backend.egress_resolver, LoopbackOnlyResolver)
    try:
        yield Rig(registry, executor, audit, backend.egress_resolver)
    finally:
        await audit.close()


@pytest.fixture
async def web_backend(
    backend_config: DockerBackendConfig, web_server: Server, docker_api: docker.APIClient,
    test_instance_id: str,
) -> AsyncIterator[DockerBackend]:
    egress = EgressConfig(ports=(web_server.port,), allow_loopback=True)
    backend = DockerBackend(backend_config.model_copy(update={"egress": egress}))
    backend.egress_resolver = LoopbackOnlyResolver()
    await backend.start()
    yield backend
    await backend.close()
    sweep(docker_api, test_instance_id)


@pytest.fixture
async def rig(web_backend: DockerBackend, sandbox_image: str,
              tmp_path: Path) -> AsyncIterator[Rig]:
    async for r in make_rig(PolicyEngine(parse_policy(POLICY)), web_backend, sandbox_image,
                            tmp_path):
        yield r


async def test_http_request_gets_through_the_proxy(rig: Rig, web_server: Server) -> None:
    url = f"http://localhost:{web_server.port}/json"
    result = await rig.call("http_request", {"url": url})
    assert result.success, result
    meta = result.metadata
    assert meta["status"] == 200 and meta["url"] == url and meta["truncated"] is False
    assert meta["headers"]["Content-Type"] == "application/json"
    assert result.output.startswith("HTTP 200 OK\nContent-Type: application/json")
    assert result.output.endswith('{"hello": "w\u00f6rld"}')
    assert f"allowed localhost:{web_server.port} x1" in meta["egress"]
    assert web_server.hits == [("GET", "/json")]
    assert [k for k, _ in await rig.kinds()] == ["intent", "outcome"]


async def test_http_request_posts_a_body_with_headers(rig: Rig, web_server: Server) -> None:
    result = await rig.call("http_request", {
        "url": f"http://localhost:{web_server.port}/echo", "method": "POST",
        "headers": {"Content-Type": "application/json", "X-Test": "yes"},
        "body": '{"n": 1}'})
    assert result.success and result.metadata["status"] == 201, result
    assert web_server.seen == [{"body": '{"n": 1}', "content_type": "application/json",
                                "x_test": "yes"}]
    assert json.loads(result.output.split("\n\n", 1)[1])["body"] == '{"n": 1}'


async def test_charset_and_error_status(rig: Rig, web_server: Server) -> None:
    latin = await rig.call("http_request",
                           {"url": f"http://localhost:{web_server.port}/latin1"})
    assert latin.success and latin.output.endswith("caf\u00e9")
    missing = await rig.call("http_request",
                             {"url": f"http://localhost:{web_server.port}/missing"})
    assert not missing.success and missing.error == "HTTP 404 Not Found"
    assert missing.metadata["status"] == 404 and missing.output.endswith("no such page")


async def test_web_view_returns_the_page_text_and_links(rig: Rig, web_server: Server) -> None:
    port = web_server.port
    result = await rig.call("web_view", {"url": f"http://localhost:{port}/redirect-local"})
    assert result.success, result
    out = result.output
    assert out.startswith(f"Title: The Test Page\nURL: http://localhost:{port}/page\n")
    assert "# Main heading" in out
    assert "First paragraph with a relative link [1]." in out
    assert "Second & last paragraph, see absolute [2]." in out
    assert "\n\n- item one\n- item two\n\nLinks:" in out
    for hidden in ("script text", "color: red", "Navigation junk", "nav-only"):
        assert hidden not in out
    assert out.endswith(f"Links:\n[1] relative link -> http://localhost:{port}/about\n"
                        f"[2] absolute -> http://localhost:{port}/abs")
    meta = result.metadata
    assert meta["title"] == "The Test Page" and meta["links"] == 2
    assert meta["redirects"] == [f"http://localhost:{port}/page"]
    assert web_server.hits == [("GET", "/redirect-local"), ("GET", "/page")]


async def test_a_host_off_the_allowlist_is_refused_without_a_container(
    rig: Rig, web_server: Server
) -> None:
    """Red when the URL's host is not decided on: a container runs (intent record) and the
    proxy refuses."""
    for tool in ("http_request", "web_view"):
        with pytest.raises(PolicyDenied) as denied:
            await rig.call(tool, {"url": f"http://elsewhere.invalid:{web_server.port}/"})
        assert denied.value.rule == f"profiles.web.tools.{tool}.egress"
        assert "egress allowlist (localhost)" in denied.value.message
        assert "elsewhere.invalid" in denied.value.message
    assert await rig.kinds() == [("denied", "profiles.web.tools.http_request.egress"),
                                 ("denied", "profiles.web.tools.web_view.egress")]
    assert web_server.hits == [] and rig.resolver.calls == []


async def test_a_redirect_off_the_allowlist_is_refused_before_connecting(
    rig: Rig, web_server: Server
) -> None:
    """Red when the fetcher follows the redirect: the proxy then refuses it (a refusal in
    the egress report) instead of the fetcher never asking."""
    result = await rig.call("http_request",
                            {"url": f"http://localhost:{web_server.port}/redirect-away"})
    assert not result.success
    assert result.error is not None and result.error.startswith("redirect_refused: ")
    assert "elsewhere.invalid refused: not in the egress allowlist (localhost)" in result.error
    assert web_server.hits == [("GET", "/redirect-away")]
    assert "refused=0" in result.metadata["egress"]
    assert "; refused " not in result.metadata["egress"]
    assert rig.resolver.calls == ["localhost"]


async def test_the_default_policy_denies_both(
    web_backend: DockerBackend, sandbox_image: str, tmp_path: Path, web_server: Server
) -> None:
    engine = PolicyEngine.from_file(ROOT / "policies" / "default.yaml")
    async for r in make_rig(engine, web_backend, sandbox_image, tmp_path):
        subject = Subject(tenant="t1", user="u", session="s1")
        url = f"http://localhost:{web_server.port}/json"
        for tool, args in (("http_request", {"url": url}), ("web_view", {"url": url}),
                           ("http_request", {})):
            with pytest.raises(PolicyDenied) as info:
                await r.call(tool, args, subject)
            assert info.value.rule == "profiles.developer.deny[group:web]"
        assert [k for k, _ in await r.kinds()] == ["denied"] * 3
    assert web_server.hits == []
