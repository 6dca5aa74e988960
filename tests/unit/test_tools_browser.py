"""`browser` without a container: a real Executor and policy engine over the scripted
`FakeBackend` (the docker test runs Chromium). The URL is checked before anything runs, the
host is part of the decision, the driver's job carries no session files, and each answer of
the driver (text, screenshot, failure, garbage, an image without Chromium) becomes the
right result."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.audit import AuditLog
from runtime.errors import InvalidInput, PolicyDenied
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject, parse_policy
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.tools import ToolContext
from runtime.tools.builtin import BrowserTool
from runtime.tools.registry import ToolRegistry
from runtime.workspace import Workspace
from tests.fakes.calls import call

POLICY = """
version: 1
images: {browser: browser}
network: {egress_allowlist: [docs.example.org]}
profiles:
  web:
    allow: [group:web]
    tools:
      browser: {network: egress, egress: [docs.example.org]}
tenants:
  "*": {profiles: [web], default_profile: web}
"""
SUBJECT = Subject(tenant="t1", user="u", session="s1", profile="web")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[tuple[ToolRegistry, ToolContext, FakeBackend]]:
    engine = PolicyEngine(parse_policy(POLICY))
    backend = FakeBackend()
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    (tmp_path / "ws").mkdir()
    ws = Workspace.at(tmp_path / "ws")
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda name: f"navi/{name}:latest")
    ctx = ToolContext(subject=SUBJECT, executor=executor, workspace=ws,
                      workspace_path=tmp_path / "ws")
    yield ToolRegistry([BrowserTool()], policy=engine), ctx, backend
    ws.close()
    await audit.close()


def answer(**fields: object) -> FakeResponse:
    return FakeResponse(stdout=json.dumps(fields).encode())


async def test_text_comes_from_the_driver_in_the_browser_image(rig) -> None:  # noqa: ANN001
    registry, ctx, backend = rig
    backend.push(answer(ok=True, title="Docs", text="Rendered: 42", truncated=False))
    result = await call(registry, "browser", {"url": "https://docs.example.org/app"}, ctx)
    assert result.success and result.output == (
        "Title: Docs\nURL: https://docs.example.org/app\n\nRendered: 42")
    (request,) = backend.requests
    assert request.image == "navi/browser:latest" and request.workspace is None  # no files
    job = json.loads(request.stdin)
    assert job["url"] == "https://docs.example.org/app" and job["action"] == "text"
    assert request.argv[:3] == ["python3", "-I", "-c"]


async def test_a_screenshot_becomes_a_session_file_and_an_image(rig) -> None:  # noqa: ANN001
    registry, ctx, backend = rig
    backend.push(answer(ok=True, png_b64=base64.b64encode(PNG).decode()))
    result = await call(registry, "browser", {"url": "https://docs.example.org/",
                                              "action": "screenshot"}, ctx)
    assert result.success, result
    path = result.metadata["path"]
    assert ctx.workspace is not None and ctx.workspace.read_bytes(path) == PNG
    assert result.metadata["images"][0]["path"] == path
    backend.push(answer(ok=True, png_b64=base64.b64encode(b"<svg/>").decode()))
    fake = await call(registry, "browser", {"url": "https://docs.example.org/",
                                            "action": "screenshot"}, ctx)
    assert not fake.success and "not a PNG" in (fake.error or "")


async def test_failures_say_what_happened(rig) -> None:  # noqa: ANN001
    registry, ctx, backend = rig
    url = {"url": "https://docs.example.org/"}
    backend.push(answer(ok=False, error="load_failed", message="the page did not load"))
    assert "load_failed" in ((await call(registry, "browser", url, ctx)).error or "")
    backend.push(FakeResponse(stdout=b"not json", exit_code=1))
    assert "without an answer" in ((await call(registry, "browser", url, ctx)).error or "")
    backend.push(FakeResponse(exit_code=127, stderr=b"chromium: not found"))
    assert "no Chromium" in ((await call(registry, "browser", url, ctx)).error or "")
    backend.push(FakeResponse(timed_out=True, exit_code=None))
    assert "timed out" in ((await call(registry, "browser", url, ctx)).error or "")


async def test_bad_urls_and_hosts_off_the_grant_run_nothing(rig) -> None:  # noqa: ANN001
    registry, ctx, backend = rig
    for bad in ("file:///etc/passwd", "https://user:pw@docs.example.org/", "javascript:1"):
        with pytest.raises(InvalidInput):
            await call(registry, "browser", {"url": bad}, ctx)
    with pytest.raises(PolicyDenied) as denied:
        await call(registry, "browser", {"url": "https://evil.example.net/"}, ctx)
    assert denied.value.rule == "profiles.web.tools.browser.egress"
    assert backend.requests == []
