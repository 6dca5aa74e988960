"""`web_search` end to end: registry -> Executor -> a real container -> the call's egress
proxy -> a scripted SearXNG-compatible server this test runs on 127.0.0.1 (loopback only,
names through a fixed table, as in test_tools_web)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runtime.audit import AuditLog
from runtime.errors import PolicyDenied
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject, parse_policy
from runtime.sandbox.docker.backend import DockerBackend
from runtime.tools import ToolContext
from runtime.tools.builtin import WebSearchTool
from runtime.tools.builtin.web import search_results
from runtime.tools.registry import ToolRegistry
from tests.docker.test_tools_web import web_backend  # noqa: F401
from tests.fakes.calls import call
from tests.fakes.json_api import json_api

pytestmark = pytest.mark.docker

ANSWER = {"query": "navi", "results": [
    {"title": "Navi  Runtime", "url": "https://navi.example/", "content": "Sandboxed\nagents"},
    {"title": "Bad scheme", "url": "javascript:alert(1)", "content": "dropped"},
    {"title": "Second", "url": "http://two.example/page", "content": ""},
    "junk",
]}

POLICY = """
version: 1
images: {group:web: python}
network: {egress_allowlist: [localhost]}
profiles:
  web:
    allow: [group:web]
    tools:
      web_search: {network: egress, egress: [localhost]}
  nosearch:
    allow: [group:web]
    deny: [web_search]
tenants:
  "*": {profiles: [web, nosearch], default_profile: web}
"""


@dataclass
class SearchServer:
    port: int = 0
    queries: list[dict[str, list[str]]] = field(default_factory=list)


@pytest.fixture
def web_server() -> Iterator[SearchServer]:
    state = SearchServer()

    def answer(request: BaseHTTPRequestHandler) -> tuple[int, Any]:
        parts = urlsplit(request.path)
        state.queries.append(parse_qs(parts.query))
        return (200, ANSWER) if parts.path == "/search" else (404, {"error": "no"})

    with json_api(answer) as state.port:
        yield state


@pytest.fixture
async def search(web_backend: DockerBackend, web_server: SearchServer,  # noqa: F811
                 sandbox_image: str, tmp_path: Path
                 ) -> AsyncIterator[tuple[ToolRegistry, Executor, AuditLog]]:
    engine = PolicyEngine(parse_policy(POLICY))
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    executor = Executor(engine=engine, backend=web_backend, audit=audit,
                        resolve_image=lambda _: sandbox_image)
    tool = WebSearchTool(f"http://localhost:{web_server.port}/search")
    yield ToolRegistry([tool], policy=engine), executor, audit
    await audit.close()


def ctx(executor: Executor, profile: str = "web") -> ToolContext:
    return ToolContext(subject=Subject(tenant="t1", user="u", session="s1", profile=profile),
                       executor=executor)


async def test_web_search_asks_the_service_through_the_proxy(
        search: tuple[ToolRegistry, Executor, AuditLog], web_server: SearchServer) -> None:
    registry, executor, audit = search
    result = await call(registry, "web_search", {"query": "navi runtime", "max_results": 5},
                                   ctx(executor))
    assert result.success, result
    assert web_server.queries == [{"q": ["navi runtime"], "format": ["json"]}]
    assert result.metadata["results"] == [
        {"title": "Navi Runtime", "url": "https://navi.example/", "snippet": "Sandboxed agents"},
        {"title": "Second", "url": "http://two.example/page", "snippet": ""}]
    assert result.output == ("1. Navi Runtime\n   https://navi.example/\n   Sandboxed agents\n"
                             "2. Second\n   http://two.example/page")
    assert [r.kind for r in await audit.records()] == ["intent", "outcome"]


async def test_web_search_is_the_policy_s_and_needs_a_service(
        search: tuple[ToolRegistry, Executor, AuditLog]) -> None:
    registry, executor, _ = search
    with pytest.raises(PolicyDenied):
        await call(registry, "web_search", {"query": "x"}, ctx(executor, "nosearch"))
    unconfigured = ToolRegistry([WebSearchTool(None)], policy=registry.policy)
    off = await call(unconfigured, "web_search", {"query": "x"}, ctx(executor))
    assert not off.success and "NAVI_SEARCH_URL" in (off.error or "")


def test_hostile_answers_are_not_results() -> None:
    assert search_results("not json", 5) is None
    assert search_results('{"results": "no"}', 5) is None
    long = {"results": [{"title": "t" * 999, "url": "https://x.example/", "content": "c" * 999}]}
    [one] = search_results(json.dumps(long), 5) or []
    assert len(one["title"]) == 200 and len(one["snippet"]) == 400
