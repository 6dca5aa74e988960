"""`http_request` / `web_view` without an engine: argument checks, the allowlist pre-check,
the default policy's denial, what the fetcher is asked to do, and its HTML -> text.

The Executor, policy engine and audit log are real (a SQLite file); the sandbox is the
package's `FakeBackend`, which records the request and answers a scripted fetcher reply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.audit import AuditLog
from runtime.egress import EgressRules
from runtime.errors import InvalidInput, PolicyDenied
from runtime.executor import Executor
from runtime.policy import Action, PolicyEngine, Subject, parse_policy
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import ExecRequest
from runtime.tools import ToolContext, ToolResult, build_tools
from runtime.tools.builtin import HttpRequestTool, WebViewTool
from runtime.tools.builtin.web_fetch import encode_fitting, host_allowed, html_to_text
from runtime.tools.builtin.web_params import egress_problem
from runtime.tools.registry import ToolRegistry
from tests.fakes.calls import call as session_call

ROOT = Path(__file__).resolve().parents[2]
HTTP = HttpRequestTool()
VIEW = WebViewTool()

POLICY = """
version: 1
images: {group:web: python}
network: {egress_allowlist: [pypi.org, "*.example.org", other.org]}
profiles:
  web:
    allow: [group:web]
    tools:
      http_request: {network: egress, egress: [pypi.org, "*.example.org"]}
  nogrant:
    allow: [group:web]
tenants:
  "*": {profiles: [web, nogrant], default_profile: web}
"""
WEB = Subject(tenant="t1", user="u", session="s1", profile="web")


def bad(tool: Any, args: dict[str, Any]) -> str:
    with pytest.raises(InvalidInput) as info:
        tool.validate(args)
    return info.value.message


# ---- arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "ftp://pypi.org/x", "file:///etc/passwd", "javascript:alert(1)", "pypi.org/simple",
    "//pypi.org/", "gopher://pypi.org/", "data:text/plain,hi", "http:///nohost", "",
])
def test_only_http_and_https_urls_with_a_host(url: str) -> None:
    message = bad(HTTP, {"url": url})
    assert message.startswith("http_request: invalid arguments: url: ")


@pytest.mark.parametrize("url", [
    "https://user:pw@pypi.org/", "https://user@pypi.org/", "http://pypi.org@evil.org/",
    "https://a:b@localhost:8080/",
])
def test_credentials_in_the_url_are_refused(url: str) -> None:
    assert "credentials" in bad(HTTP, {"url": url})


@pytest.mark.parametrize("url", [
    "https://pypi.org/a b", "https://pypi.org/\r\nHost: evil", "https://pypi.org/\x00",
    "https://pypi.org:99999/", "https://pypi.org:x/", "https://b\u00fccher.de/",
    "https://pypi.org/" + "a" * 2048,
])
def test_malformed_urls_are_refused(url: str) -> None:
    bad(HTTP, {"url": url})


def test_urls_are_normalised() -> None:
    params = HTTP.validate({"url": "HTTPS://PyPI.org/caf\u00e9?q=\u00fc#frag"})
    assert params.url == "https://PyPI.org/caf%C3%A9?q=%C3%BC"  # type: ignore[attr-defined]
    assert VIEW.validate({"url": "http://pypi.org"}).url == "http://pypi.org/"  # type: ignore[attr-defined]


@pytest.mark.parametrize("headers", [
    {"X-A": "ok\r\nHost: evil.org"}, {"X-A": "ok\nSet-Cookie: x"}, {"X-A": "a\rb"},
    {"X-A": "nul\x00"}, {"X-A\r\nHost": "evil"}, {"X A": "v"}, {"X:A": "v"}, {"": "v"},
    {"X-A": "\u2603"},
])
def test_header_injection_is_refused(headers: dict[str, str]) -> None:
    """Red when header names/values are not checked (CR/LF would split the request)."""
    message = bad(HTTP, {"url": "https://pypi.org/", "headers": headers})
    assert "headers: " in message


@pytest.mark.parametrize("name", [
    "Host", "host", "Connection", "Proxy-Authorization", "proxy-connection", "Proxy-Foo",
    "Transfer-Encoding", "Content-Length", "Upgrade", "TE", "Keep-Alive", "Accept-Encoding",
])
def test_headers_the_fetcher_or_proxy_own_are_refused(name: str) -> None:
    assert "may not be set" in bad(HTTP, {"url": "https://pypi.org/", "headers": {name: "x"}})


def test_header_count_duplicates_and_size() -> None:
    many = {f"X-{i}": "v" for i in range(33)}
    assert "at most 32" in bad(HTTP, {"url": "https://pypi.org/", "headers": many})
    assert "twice" in bad(HTTP, {"url": "https://pypi.org/",
                                 "headers": {"X-A": "1", "x-a": "2"}})
    assert "longer" in bad(HTTP, {"url": "https://pypi.org/", "headers": {"X-A": "v" * 4097}})


def test_body_size_method_and_other_bounds() -> None:
    url = "https://pypi.org/"
    assert "larger than" in bad(HTTP, {"url": url, "method": "POST",
                                       "body": "x" * (256 * 1024 + 1)})
    assert "larger than" in bad(HTTP, {"url": url, "method": "POST",
                                       "body": "\u00e9" * (128 * 1024 + 1)})  # bytes count
    HTTP.validate({"url": url, "method": "POST", "body": "x" * (256 * 1024)})
    assert "takes no body" in bad(HTTP, {"url": url, "method": "GET", "body": "x"})
    assert "lone surrogate" in bad(HTTP, {"url": url, "method": "PUT", "body": "\ud800"})
    bad(HTTP, {"url": url, "method": "TRACE"})
    bad(HTTP, {"url": url, "method": "CONNECT"})
    bad(HTTP, {"url": url, "timeout_s": 0})
    bad(HTTP, {"url": url, "timeout_s": 121})
    assert "unknown argument" in bad(HTTP, {"url": url, "proxy": "http://x"})
    bad(VIEW, {"url": url, "max_chars": 100})
    bad(VIEW, {"url": url, "method": "POST"})


def test_schemas_are_the_param_models() -> None:
    for tool in (HTTP, VIEW):
        spec = tool.spec()
        assert spec.group == "group:web" and spec.parameters["required"] == ["url"]
        assert spec.parameters["additionalProperties"] is False
    assert HTTP.spec().parameters["properties"]["method"]["enum"] == [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


# ---- the allowlist ------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "allowed"), [
    ("https://pypi.org/simple", True), ("https://PYPI.ORG./x", True),
    ("http://pypi.org:8080/", True),  # the port is the proxy's business
    ("https://files.pypi.org/", False), ("https://a.example.org/", True),
    ("https://a.b.example.org/", True), ("https://example.org/", False),
    ("https://pypi.org.evil.com/", False), ("https://evilpypi.org/", False),
    ("http://127.0.0.1/", False), ("http://[::1]/", False),
])
def test_egress_problem_follows_the_proxys_name_rules(url: str, allowed: bool) -> None:
    allowlist = ["pypi.org", "*.example.org"]
    problem = egress_problem(url, allowlist)
    assert (problem is None) is allowed, problem
    if problem is not None:
        assert "(pypi.org, *.example.org)" in problem
    # the fetcher's redirect check agrees with the proxy and the supervisor
    from urllib.parse import urlsplit
    host = urlsplit(url).hostname or ""
    assert host_allowed(host, allowlist) is allowed
    assert (EgressRules(allowlist, ports=[80, 443, 8080]).check_name(host, 443) is None) \
        is allowed


def test_no_grant_is_a_clear_problem() -> None:
    problem = egress_problem("https://pypi.org/", [])
    assert problem is not None and "no egress" in problem


# ---- calls through a real Executor and audit, fake sandbox -----------------------------------

def reply(**fields: Any) -> FakeResponse:
    body = {"ok": True, "status": 200, "reason": "OK", "url": "https://pypi.org/simple/",
            "headers": [["Content-Type", "text/plain"]], "truncated": False,
            "elapsed_ms": 12, "redirects": [], "content_type": "text/plain", **fields}
    return FakeResponse(stdout=json.dumps(body).encode(), exit_code=0 if body["ok"] else 1)


def rig(audit: AuditLog, backend: FakeBackend, policy: str | None = None
        ) -> tuple[ToolRegistry, Executor]:
    engine = (PolicyEngine(parse_policy(policy)) if policy
              else PolicyEngine.from_file(ROOT / "policies" / "default.yaml"))
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda name: f"navi/{name}:latest")
    return ToolRegistry([HTTP, VIEW], policy=engine), executor


async def call(registry: ToolRegistry, executor: Executor, tool: str, args: Any,
               subject: Subject = WEB, **ctx: Any) -> ToolResult:
    return await session_call(registry, tool, args,
                              ToolContext(subject=subject, executor=executor, **ctx))


async def test_a_host_off_the_allowlist_is_denied_by_the_engine_and_runs_nothing(
        audit: AuditLog) -> None:
    """Red when the URL's host is left out of the decision: the fake sandbox then receives
    a request."""
    backend = FakeBackend(default=reply())
    registry, executor = rig(audit, backend, POLICY)
    with pytest.raises(PolicyDenied) as denied:
        await call(registry, executor, "http_request", {"url": "https://other.org/x"})
    assert denied.value.rule == "profiles.web.tools.http_request.egress"
    assert denied.value.message.startswith("other.org is not in the egress allowlist "
                                           "(pypi.org, *.example.org)")
    nogrant = Subject(tenant="t1", user="u", session="s1", profile="nogrant")
    with pytest.raises(PolicyDenied) as denied:
        await call(registry, executor, "web_view", {"url": "https://pypi.org/"}, nogrant)
    assert "no egress" in denied.value.message
    assert backend.requests == []
    assert [(r.kind, r.rule, r.tool) for r in await audit.records()] == [
        ("denied", "profiles.web.tools.http_request.egress", "http_request"),
        ("denied", "profiles.nogrant.tools.web_view.egress", "web_view")]


def test_the_engine_checks_every_named_host_against_the_grant() -> None:
    engine = PolicyEngine(parse_policy(POLICY))
    ok = engine.decide(WEB, Action(tool="http_request", group="group:web",
                                   hosts=("a.example.org",)))
    assert ok.verdict == "allow" and ok.egress_allowlist == ["pypi.org", "*.example.org"]
    off = engine.decide(WEB, Action(tool="http_request", group="group:web",
                                    hosts=("pypi.org", "example.org")))
    assert (off.verdict, off.rule) == ("deny", "profiles.web.tools.http_request.egress")
    assert off.reason.startswith("example.org is not in the egress allowlist")
    # no hosts named (the listing's probe): the grant alone decides
    assert engine.decide(WEB, Action(tool="http_request", group="group:web")).verdict == "allow"


async def test_an_allowed_call_asks_the_sandbox_for_exactly_this_fetch(
        audit: AuditLog, tmp_path: Path) -> None:
    backend = FakeBackend(default=reply(body="hello", headers=[["Content-Type", "text/plain"],
                                                               ["X-Other", "1"]]))
    registry, executor = rig(audit, backend, POLICY)
    result = await call(registry, executor, "http_request",
                        {"url": "https://pypi.org/simple/", "method": "POST", "body": "b",
                         "headers": {"X-A": "1"}, "timeout_s": 5},
                        workspace_path=tmp_path)
    assert result.success and result.output == "HTTP 200 OK\nContent-Type: text/plain\n\nhello"
    meta = result.metadata
    assert meta["status"] == 200 and meta["url"] == "https://pypi.org/simple/"
    assert meta["headers"] == {"Content-Type": "text/plain", "X-Other": "1"}
    assert meta["stdout"] == "" and meta["exit_code"] == 0 and meta["exec_id"]
    assert result.execution is not None and result.execution.stdout == ""  # the API's stdout
    [request] = backend.requests
    assert isinstance(request, ExecRequest)
    assert request.image == "navi/python:latest" and request.argv[:3] == ["python3", "-I", "-c"]
    assert request.network == "egress" and request.egress_allowlist == ["pypi.org",
                                                                        "*.example.org"]
    assert request.workspace is None  # no session files for a fetch
    assert request.limits.timeout_s == 15  # 5 s of request + 10 s to start
    job = json.loads(request.stdin)
    assert job == {"method": "POST", "headers": {"X-A": "1"}, "body": "b",
                   "max_body_bytes": 1024 * 1024, "max_chars": 0, "mode": "request",
                   "url": "https://pypi.org/simple/", "timeout_s": 5.0, "max_redirects": 5,
                   "allowlist": ["pypi.org", "*.example.org"],
                   "max_output": 1024 * 1024 - 256}
    kinds = [(r.kind, r.decision) for r in await audit.records()]
    assert kinds == [("intent", "allow"), ("outcome", "allow")]


async def test_fetcher_failures_become_clear_errors(audit: AuditLog) -> None:
    backend = FakeBackend([
        reply(ok=False, status=None, error="redirect_refused",
              message="redirect to evil.org refused: not in the egress allowlist (pypi.org)"),
        reply(ok=False, status=503, reason="Service Unavailable", body="busy",
              error="http_status", message="HTTP 503 Service Unavailable"),
        FakeResponse(exit_code=1, stdout=b"", stderr=b"Traceback: boom"),
        FakeResponse(exit_code=None, timed_out=True),
    ])
    registry, executor = rig(audit, backend, POLICY)
    url = {"url": "https://pypi.org/"}
    first = await call(registry, executor, "http_request", url)
    assert first.error == ("redirect_refused: redirect to evil.org refused: not in the egress "
                           "allowlist (pypi.org)")
    second = await call(registry, executor, "http_request", url)
    assert second.error == "HTTP 503 Service Unavailable" and second.output.endswith("busy")
    third = await call(registry, executor, "http_request", url)
    assert third.error == "the fetcher ended without an answer (exit code 1)"
    assert "boom" in third.output
    fourth = await call(registry, executor, "http_request", url)
    assert fourth.error is not None and fourth.error.startswith("timed out after")
    assert not any(r.success for r in (first, second, third, fourth))


async def test_the_default_policy_denies_both_with_the_rule(audit: AuditLog) -> None:
    """group:web is denied by default, so a denial is always observable; also with
    arguments that do not validate (the policy speaks first)."""
    backend = FakeBackend()
    registry, executor = rig(audit, backend)
    user = Subject(tenant="t1", user="u", session="s1")
    for tool, args in (("http_request", {"url": "https://pypi.org/"}),
                       ("web_view", {"url": "https://pypi.org/"}),
                       ("http_request", {}), ("web_view", {"url": "ftp://x"})):
        with pytest.raises(PolicyDenied) as info:
            await call(registry, executor, tool, args, user)
        assert info.value.rule == "profiles.developer.deny[group:web]"
    assert backend.requests == []
    records = await audit.records()
    assert [(r.kind, r.rule) for r in records] == [
        ("denied", "profiles.developer.deny[group:web]")] * 4
    assert await registry.specs(user) == []  # not listed to a subject that may not use them


async def test_bad_arguments_of_an_allowed_tool_stay_argument_errors(audit: AuditLog) -> None:
    registry, executor = rig(audit, FakeBackend(), POLICY)
    with pytest.raises(InvalidInput):
        await call(registry, executor, "http_request", {"url": "ftp://pypi.org/"})
    assert await audit.records() == []


def test_registered_with_the_other_builtins(tmp_path: Path) -> None:
    registry = build_tools(tmp_path).registry
    tools = {t.name: t for t in registry.builtins()}
    assert tools["http_request"].group == tools["web_view"].group == "group:web"


# ---- the fetcher's own pieces (they run in the container; tested here as plain code) ---------

def test_html_to_text_keeps_structure_and_lists_links() -> None:
    page = ("<html><head><title>T &amp; U</title><base href='https://docs.example.org/a/'>"
            "<style>x{}</style><body><nav>menu <a href='/x'>x</a></nav>"
            "<h2>Sub</h2><p>One <b>bold</b>\n  word.<br>Next line</p>"
            "<script>alert('no')</script><noscript>no js</noscript>"
            "<a href='b.html#frag'>B</a> <a href='b.html'>again</a> "
            "<a href='mailto:x@y'>mail</a> <a href='javascript:1'>js</a>"
            "<pre>  keep   spaces</pre><template>hidden</template></body></html>")
    out = html_to_text(page, "https://docs.example.org/start", 10_000)
    assert out["title"] == "T & U"
    assert out["text"] == ("## Sub\n\nOne bold word.\nNext line\n\nB [1] again [1] mail js\n\n"
                           "keep   spaces")
    assert out["links"] == [["B", "https://docs.example.org/a/b.html"]]
    assert out["cut"] is False
    cut = html_to_text("<p>" + "word " * 1000 + "</p>", "https://x.org/", 500)
    assert cut["cut"] is True and len(cut["text"]) == 500


def test_html_without_closing_head_still_has_a_body() -> None:
    out = html_to_text("<html><head><title>t</title><body><p>text</p>", "https://x.org/", 100)
    assert out["text"] == "text" and out["title"] == "t"


def test_the_answer_is_cut_to_fit_the_output_limit() -> None:
    answer = {"ok": True, "status": 200, "body": "\u00e9" * 50_000, "headers": [],
              "truncated": False}
    data = encode_fitting(dict(answer), 20_000)
    assert len(data) <= 20_000
    parsed = json.loads(data)
    assert parsed["truncated"] is True and parsed["body"].startswith("\u00e9\u00e9")
    assert json.loads(encode_fitting(dict(answer), 200_000))["truncated"] is False
