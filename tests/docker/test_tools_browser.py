"""`browser` end to end: registry -> Executor -> a real container of the `navi/browser`
image (Debian's Chromium, headless) -> the call's egress proxy -> an HTTP server this test
runs on the host's 127.0.0.1. The page builds its text with JavaScript (web_view would see
none of it) and loads a script and an image from the same host; a second host is refused by
the engine before any container starts, and a page that tries to reach a host off the grant
from inside is cut by the proxy.

The image is built on demand (it is large, so `navi images build` without names skips it):
this module builds it first when it is missing or out of date, offline like every image.

Only loopback traffic: the proxy may reach loopback because the backend's egress config
turns `allow_loopback` on, and names resolve through a fixed table (localhost -> 127.0.0.1).
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from runtime.audit import AuditLog
from runtime.egress import EgressConfig
from runtime.errors import PolicyDenied
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject, parse_policy
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.images import build_images, image_ref
from runtime.tools import ToolContext, ToolResult
from runtime.tools.builtin import BrowserTool
from runtime.tools.registry import ToolRegistry
from runtime.workspace import Workspace
from tests.docker.sandbox_fixtures import sweep
from tests.fakes.calls import call
from tests.fakes.json_api import QuietHandler, serving
from tests.fakes.resolver import LoopbackOnlyResolver

pytestmark = pytest.mark.docker

PAGE = """<!doctype html><html><head><title>Rendered by script</title>
<script src="/app.js"></script></head>
<body><h1>Static heading</h1><div id="out"></div><img src="/pixel.png" alt="">
<script>fetch("http://elsewhere.invalid:{port}/stolen").catch(() => {{}});</script>
</body></html>"""
SCRIPT = """document.addEventListener("DOMContentLoaded", () => {
  const p = document.createElement("p");
  p.textContent = "Made by JavaScript: " + (6 * 7);
  document.getElementById("out").appendChild(p);
});"""
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


@dataclass
class Site:
    port: int = 0
    hits: list[str] = field(default_factory=list)


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.hits.append(self.path)
            body, ctype = {
                "/page": (PAGE.format(port=state.port).encode(), "text/html; charset=utf-8"),
                "/app.js": (SCRIPT.encode(), "text/javascript"),
                "/pixel.png": (PIXEL, "image/png"),
            }.get(self.path, (b"no such page", "text/plain"))
            self.send(200 if body != b"no such page" else 404, body, ctype)

    with serving(Handler) as port:
        state.port = port
        yield state


POLICY = """
version: 1
defaults:
  limits: {timeout_s: 60, max_timeout_s: 120, memory_mb: 1024, pids: 512, tmp_mb: 256}
images: {browser: browser}
network: {egress_allowlist: [localhost, elsewhere.invalid]}
profiles:
  web:
    allow: [group:web]
    tools:
      browser: {network: egress, egress: [localhost]}
tenants:
  "*": {profiles: [web], default_profile: web}
"""
SUBJECT = Subject(tenant="t1", user="u", session="s1", profile="web")


@pytest.fixture(scope="module")
def browser_image() -> str:
    """`navi/browser:latest`, built now if missing or stale (on demand: minutes, once)."""
    started = time.monotonic()
    (result,) = build_images(["browser"])
    print(f"browser image {result.status} in {time.monotonic() - started:.0f} s")
    return image_ref("browser")


@dataclass
class Rig:
    registry: ToolRegistry
    executor: Executor
    audit: AuditLog
    workspace: Workspace

    async def call(self, args: dict[str, object]) -> ToolResult:
        ctx = ToolContext(subject=SUBJECT, executor=self.executor, workspace=self.workspace)
        return await call(self.registry, "browser", args, ctx)


@pytest.fixture
async def rig(backend_config: DockerBackendConfig, site: Site, docker_api: docker.APIClient,
              test_instance_id: str, browser_image: str, tmp_path: Path
              ) -> AsyncIterator[Rig]:
    egress = EgressConfig(ports=(site.port,), allow_loopback=True)
    backend = DockerBackend(backend_config.model_copy(update={"egress": egress}))
    backend.egress_resolver = LoopbackOnlyResolver()
    await backend.start()
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    (tmp_path / "ws").mkdir()
    workspace = Workspace.at(tmp_path / "ws")
    engine = PolicyEngine(parse_policy(POLICY))
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda _: browser_image)
    try:
        yield Rig(ToolRegistry([BrowserTool()], policy=engine), executor, audit, workspace)
    finally:
        workspace.close()
        await audit.close()
        await backend.close()
        sweep(docker_api, test_instance_id)


async def test_the_page_s_javascript_ran_and_its_text_comes_back(rig: Rig, site: Site) -> None:
    url = f"http://localhost:{site.port}/page"
    result = await rig.call({"url": url})
    assert result.success, (result.error, result.output)
    assert result.output.startswith(f"Title: Rendered by script\nURL: {url}\n\n")
    assert "Static heading" in result.output
    assert "Made by JavaScript: 42" in result.output  # only a browser sees this
    assert "document.createElement" not in result.output  # scripts are not text
    assert {"/page", "/app.js", "/pixel.png"} <= set(site.hits)
    assert "/stolen" not in site.hits  # the page's request off the grant: refused
    egress = result.metadata["egress"]
    assert f"allowed localhost:{site.port}" in egress and "elsewhere.invalid" in egress
    kinds = [(r.kind, r.tool) for r in await rig.audit.records()]
    assert kinds == [("intent", "browser"), ("outcome", "browser")]


async def test_a_screenshot_is_a_png_saved_in_the_session(rig: Rig, site: Site) -> None:
    result = await rig.call({"url": f"http://localhost:{site.port}/page",
                             "action": "screenshot"})
    assert result.success, (result.error, result.output)
    path = result.metadata["path"]
    assert path.startswith("screenshots/") and path.endswith(".png")
    png = rig.workspace.read_bytes(path)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert int.from_bytes(png[16:20], "big") == 1280  # the window's width
    (image,) = result.metadata["images"]
    assert base64.b64decode(image["data_b64"]) == png
    actions = [r.action for r in await rig.audit.records()]
    assert "file.write" in actions


async def test_a_host_off_the_grant_is_denied_before_a_container_starts(
        rig: Rig, site: Site, docker_api: docker.APIClient, test_instance_id: str) -> None:
    with pytest.raises(PolicyDenied) as denied:
        await rig.call({"url": f"http://elsewhere.invalid:{site.port}/page"})
    assert "egress" in denied.value.rule
    assert site.hits == []
    assert [r.kind for r in await rig.audit.records()] == ["denied"]
